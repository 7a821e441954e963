"""The web board: people watch and steer the agent team in a browser, on the same port as /mcp.

Pages are rendered on the server (pages.py) from the board's read models (board/views.py); actions
are plain HTML forms that call the same board functions, through the same state machine, as the MCP
tools, under the person's own identity (auth.py); open pages are kept current by server-sent events
from the board's commit events (live.py). Everything it serves ships in this package.
"""

from .app import WebBoard, web_routes

__all__ = ["WebBoard", "web_routes"]
