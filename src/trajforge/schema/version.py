"""The trajectory schema's semantic version. Bump it whenever the JSON Schema changes:
patch for documentation, minor for additive optional fields, major for anything a reader of the
old version could not load."""

SCHEMA_VERSION = "1.4.0"
