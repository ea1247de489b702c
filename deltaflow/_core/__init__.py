"""Sans-IO primitives shared by parsers and stages (no I/O, no event loop)."""
