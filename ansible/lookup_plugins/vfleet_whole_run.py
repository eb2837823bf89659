# Copyright: the vfleet authors. Apache-2.0.
"""A playbook that locks the fleet runs whole, or not at all.

rollout.yml, rollback.yml, verify.yml and unlock.yml (and swap.yml, which the first two import) name
the hosts of their first play through this lookup: it returns its term (the host pattern) when the run
selects every task, and otherwise fails the play before any task runs. Every task of these playbooks
is a gate or what the gates guard, and a partial run gets around them: --skip-tags skips even a task
tagged `always` (--skip-tags always, or untagged, tagged, all), --tags that leaves out the verify ends
a fleet verify green with nothing verified, and --start-at-task or --step skips whatever comes first.
A task cannot check this, since the same options skip it; the hosts of a play are templated before
any task, where no tag reaches. --check is refused too: a command task does not run in check mode, so the
gates' `vfleet` calls would be skipped and the run would end green. The options are read from
ansible-playbook's own arguments (ANSIBLE_RUN_TAGS and ANSIBLE_SKIP_TAGS land there too), which no extra
var can stand in for.

    hosts: "{{ lookup('vfleet_whole_run', 'localhost') }}"
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible import context

DOCUMENTATION = r"""
name: vfleet_whole_run
short_description: The host pattern of a play that must run whole, or a failure naming what would be skipped
description:
  - Returns its terms when ansible-playbook runs every task (no --tags other than all, no --skip-tags, no
    --start-at-task, no --step, no --check) or runs none (--list-tasks, --list-tags, --list-hosts, --syntax-check);
    otherwise fails, naming the option and the fix.
author: vfleet
"""

#: Why each option is refused, by ansible-playbook's argument name.
WHY = {
    "tags": "--tags {} (ANSIBLE_RUN_TAGS) would leave out the tasks not tagged so",
    "skip_tags": "--skip-tags {} (ANSIBLE_SKIP_TAGS) would skip tasks, gates included (even those tagged always)",
    "start_at_task": "--start-at-task {} would skip every task before it, gates included",
    "step": "--step would let each task be skipped by hand, gates included",
    "check": "--check would skip every command task, the gates' `vfleet` calls included, and end as a pass",
}


#: ansible-playbook's options that list or check the playbook and run no task: free to take tags.
LISTING = ("listhosts", "listtasks", "listtags", "syntax")


def refusals(cliargs: Any) -> list[str]:
    """What in CLIARGS (ansible-playbook's parsed arguments) would run part of the playbook."""
    if any(cliargs.get(name) for name in LISTING):
        return []
    tags = [t for t in cliargs.get("tags") or () if t != "all"]
    given = {
        "tags": ",".join(tags),
        "skip_tags": ",".join(cliargs.get("skip_tags") or ()),
        "start_at_task": cliargs.get("start_at_task") or "",
        "step": "yes" if cliargs.get("step") else "",
        "check": "yes" if cliargs.get("check") else "",
    }
    return [WHY[name].format(value) for name, value in given.items() if value]


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        found = refusals(context.CLIARGS)
        if found:
            books = ", ".join(str(a) for a in context.CLIARGS.get("args") or ()) or "this playbook"
            raise AnsibleError(
                f"{books} runs whole: {'; '.join(found)}. Every task of a run that locks the fleet is a gate or "
                "what the gates guard; run it without --tags, --skip-tags, --start-at-task, --step and --check (and "
                "unset ANSIBLE_RUN_TAGS and ANSIBLE_SKIP_TAGS). Nothing has been touched."
            )
        return list(terms)
