from typer.testing import CliRunner

from hadw import __version__
from hadw.cli import build_app


def test_version_command_prints_package_version():
    result = CliRunner().invoke(build_app(), ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == __version__
