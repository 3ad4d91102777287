"""The settings' declarations by concept, and how a setting is declared and read.

`knowledge_api.settings.Settings` is the one object built from them; the groups here
are its bases, so each concept's settings sit together with their rules.
"""
