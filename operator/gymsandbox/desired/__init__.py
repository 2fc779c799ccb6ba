"""Pure builders: a validated object plus cluster policy in, child manifests (plain dicts) out."""
