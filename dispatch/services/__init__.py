"""The one write path (STYLE §2): every state change goes through a function in this package."""
