"""The postgres and supabase stores on the production schema, and the embedded server."""
