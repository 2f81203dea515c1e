"""The Pulumi program's components, config and the single sources of truth they share."""
