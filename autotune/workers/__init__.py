"""Ray workers: one long-lived actor per GPU group, each running trials on its backend."""
