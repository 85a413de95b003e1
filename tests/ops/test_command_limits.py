"""Every management command's limits: refused with a sentence naming the option, as documented."""

import pytest
from django.core.management import CommandError, call_command

from tests.ops.conftest import ROOT


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (("prune", "--older-than", "0"), "--older-than must be at least 1 day"),
        (("prune", "--older-than", "30", "--batch-size", "0"), "--batch-size must be at least 1"),
        (("run_periodic", "--interval", "0"), "--interval must be at least 1 second"),
        (("import_allowlist",), "no allowlist given and CRCR_ALLOWLIST is not set"),
        (("import_allowlist", "allowlist.yml", "--since", "last week"), "expected YYYY-MM-DD"),
        (("import_results", "/nonexistent/results.jsonl"), "is not a file"),
    ],
)
def test_each_refused_limit_is_named_and_documented(db, args, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command(*args)
    assert refusal in (ROOT / "README.md").read_text()
