"""__main__.py: ``gluon-bbb`` alone or with --help lists the commands, an unknown one is one
line and status 2, and a command's name runs that command with its own prog."""
import pytest

from gluon_bbb.__main__ import main
from gluon_bbb.commands import COMMANDS


def test_the_entry_point_lists_refuses_and_runs(capsys):
    assert main([]) == 2
    usage = capsys.readouterr().err
    assert usage.startswith("usage: gluon-bbb COMMAND [FLAGS]")
    assert all("  %s " % name in usage for name in COMMANDS)
    assert main(["--help"]) == 0 and capsys.readouterr().out == usage
    assert main(["fly"]) == 2
    assert capsys.readouterr().err == "gluon-bbb: error: no command 'fly' (one of %s)\n" % (
        ", ".join(COMMANDS))
    with pytest.raises(SystemExit) as stop:  # argparse's --help, as from the shell
        main(["predict", "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: gluon-bbb predict ")
