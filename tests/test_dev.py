"""dev/ holds maintained tools only, each described in dev/README.md, and the design record (issue 17)."""

from conftest import ROOT


def test_every_tool_in_dev_is_described_in_its_readme():
    readme = (ROOT / "dev" / "README.md").read_text()
    tools = sorted(p.name for p in (ROOT / "dev").iterdir() if p.is_file() and p.name not in ("README.md", "DESIGN.md"))
    assert tools, "dev/ has no tools"
    missing = [name for name in tools if f"| `{name}` |" not in readme]
    assert not missing, f"dev/README.md's table does not describe {missing}"
