"""The README's library example runs as written (in a fresh directory, as a script)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs(tmp_path: Path) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(example)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "TurnResult(turn=1, reason='completed'" in result.stdout
    assert result.stdout.strip().endswith("['user', 'assistant', 'user', 'assistant']")
    assert (tmp_path / "demo.db").exists()


def test_readme_shows_the_two_commands() -> None:
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert any("actorloop run" in block for block in blocks)
    assert any("pytest" in block for block in blocks)
