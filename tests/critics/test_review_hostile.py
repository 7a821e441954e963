"""Submitted work is hostile: reviewing it must never import or run it on the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewing import critic, hand_in, verdict

pytestmark = pytest.mark.anyio

# Names an analyser (bandit, its plugins, the interpreter's site machinery, pytest) would import if the
# artifact directory were on its import path.
SHADOWING = ["yaml.py", "argparse.py", "bandit.py", "stevedore.py", "bandit/__init__.py", "sitecustomize.py",
             "usercustomize.py", "conftest.py"]


def planting(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"


@pytest.mark.parametrize("name", [*SHADOWING, "evil.pth"])
async def test_no_analyser_imports_a_submitted_file(connect, reviewer, tmp_path, name):
    marker = tmp_path / f"marker-{name.replace('/', '_')}"
    content = planting(marker)
    if name.endswith(".pth"):  # a .pth line starting with "import" runs when a site directory holds it
        content = content.replace("\n", "; ", 1)
    engine = reviewer()
    async with connect("mallory", review=engine) as c:
        card = await hand_in(c, artifacts=[{"name": name, "kind": "code", "content": content},
                                           {"name": "app.py", "kind": "code", "content": "X = 1\n"}])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert not marker.exists(), f"{name} was imported while the work was reviewed"
    for name_ in ("bandit", "ruff"):
        assert critic(round1, name_)["status"] == "ok", critic(round1, name_)
