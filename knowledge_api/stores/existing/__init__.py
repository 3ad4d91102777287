"""The store on a database other pipelines fill: adopted or read-only."""
