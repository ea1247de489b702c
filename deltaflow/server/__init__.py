"""The ASGI server (``deltaflow serve``) lives here once the wire protocols land."""
