"""The partition algebra: hierarchies, split kinds, layouts and redistribution (pure data)."""
