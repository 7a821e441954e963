"""The board layer: SQLite store, tasks, claims, agents. Knows nothing of MCP.

Names are imported from the module that defines them (`from hiveboard.board.tasks import Board`): importing the
package itself loads nothing, so a light module of it (board/hook_view.py, what `hiveboard hook` reads with) does
not pay for the rest.
"""
