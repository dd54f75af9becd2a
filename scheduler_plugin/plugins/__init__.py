"""In-tree scheduling plugins; the registry table is `scheduler_plugin.plugins.registry`."""
