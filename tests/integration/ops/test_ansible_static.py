"""The Ansible side without a fleet: lint at the production profile, syntax, the example inventory
against the profile catalog, the inventory guard, and how the CLI keeps the controller plays in a --limit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vfleet.cli import main
from vfleet.errors import VfleetError
from vfleet.fleet.ansible import PLAYBOOKS, ansible_dir, bin_dir, env, with_controller
from vfleet.profiles import Catalog

EXAMPLE = ansible_dir() / "inventories" / "example"


def test_ansible_lint_production_profile_is_clean() -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-lint"), "--profile", "production", "--nocolor", "."],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Profile 'production' was required, and it passed" in out


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str) -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "--syntax-check", "-i", str(EXAMPLE), f"{playbook}.yml"],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_inventory_names_real_profiles_per_platform_group() -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-inventory"), "-i", str(EXAMPLE), "--list"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    inv = json.loads(proc.stdout)
    catalog = {p.name: p for p in Catalog().load_all()}
    groups = inv["vfleet_nodes"]["children"]
    assert {"rocm_mi355x", "cuda_b200"} <= set(groups)
    hostvars = inv["_meta"]["hostvars"]
    for group in groups:
        family, platform = group.split("_", 1)
        for host in inv[group]["hosts"]:
            profile = hostvars[host]["vfleet_node_profile"]
            assert profile in catalog, f"{host}: unknown profile {profile}"
            assert catalog[profile].platform.platform == platform
            assert catalog[profile].family == family
            assert catalog[profile].production


def test_a_wrong_inventory_path_fails_instead_of_running_on_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "-i", str(tmp_path / "missing"), "status.yml"],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout


def test_cli_names_a_missing_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["fleet", "rollout", "-i", str(tmp_path / "nope"), "--image", "r/x:1"])
    assert rc == 2
    assert "nope does not exist" in capsys.readouterr().err


def test_limit_keeps_the_controller_plays_and_means_what_it_says() -> None:
    everyone = [
        "mi355x-01.example.internal",
        "mi355x-02.example.internal",
        "mi355x-03.example.internal",
        "mi350x-01.example.internal",
        "b200-01.example.internal",
        "b200-02.example.internal",
        "gb300-01.example.internal",
    ]
    one = with_controller(EXAMPLE, "b200-02.example.internal")
    assert one == "localhost,b200-02.example.internal"
    # An exclusion alone means "every host but": localhost is added without turning it into "only localhost".
    hosts = with_controller(EXAMPLE, "vfleet_nodes:!mi355x-01.example.internal").split(",")
    assert hosts[0] == "localhost" and set(hosts[1:]) == set(everyone) - {"mi355x-01.example.internal"}
    hosts = with_controller(EXAMPLE, "rocm_mi355x:&mi355x-0[12].example.internal").split(",")
    assert set(hosts) == {"localhost", "mi355x-01.example.internal", "mi355x-02.example.internal"}
    with pytest.raises(VfleetError, match="selects no host"):
        with_controller(EXAMPLE, "no-such-host")


def test_forks_follow_the_run_so_a_batch_never_waits_in_rounds() -> None:
    """ansible.cfg's 32 forks would run a batch of 250 nodes (a 1,000-node fleet at 25%) in 8 rounds of
    drain, boot and boot-verify; the CLI asks for one fork per node of the run, within 32..256."""
    from vfleet.fleet.ansible import MAX_FORKS, MIN_FORKS, forks_for

    cfg = (ansible_dir() / "ansible.cfg").read_text()
    assert f"forks = {MIN_FORKS}" in cfg
    assert [forks_for(n) for n in (1, 32, 33, 250, 1000)] == [MIN_FORKS, 32, 33, 250, MAX_FORKS]


def test_every_command_works_without_an_ansible_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Inside an image there is no ansible/ tree: building the CLI (any vfleet command, the entrypoint
    included) must not read it, and a fleet run there names what is missing."""
    import vfleet.fleet.ansible as ansible_mod
    from vfleet.cli import main

    monkeypatch.setattr(ansible_mod, "ansible_dir", lambda: tmp_path / "no-ansible")
    assert main(["profiles"]) == 0
    capsys.readouterr()
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    assert main(["fleet", "status", "-i", str(inv)]) != 0
    err = capsys.readouterr().err
    assert "no-ansible/status.yml does not exist: run vfleet fleet from a vfleet checkout" in err, err
    with pytest.raises(VfleetError, match=r"no-ansible/roles/vfleet/defaults/main\.yml: cannot read the role defaults"):
        ansible_mod.role_defaults("vfleet")


# Issue 35, item 7: tags on every entry point, the playbooks that lock the fleet run whole, no role reads
# another's defaults, the controller's vfleet command written once.

#: The playbooks that lock the fleet (and swap.yml, which rollout and rollback import): every task is a
#: gate or what the gates guard, so no option that runs part of them is taken (vfleet_whole_run).
WHOLE_RUN = ("rollout", "rollback", "verify", "unlock", "swap")
INCLUDES = {"include_role", "import_role", "include_tasks", "import_tasks"}


def _tasks(items: list[dict[str, Any]] | None) -> Iterator[dict[str, Any]]:
    """Every task of ITEMS, the tasks of blocks (and their rescue and always) included."""
    for item in items or []:
        nested = [item.get(key) for key in ("block", "rescue", "always") if key in item]
        yield from (t for part in nested for t in _tasks(part))
        if not nested:
            yield item


def _include(task: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(action, its arguments) when TASK includes or imports a role or a task file."""
    for key, args in task.items():
        action = key.removeprefix("ansible.builtin.")
        if action in INCLUDES:
            return action, args if isinstance(args, dict) else {"file": args}
    return None


def _tags(node: dict[str, Any]) -> set[str]:
    tags = node.get("tags") or []
    return {tags} if isinstance(tags, str) else set(tags)


def untagged_entries(root: Path) -> list[str]:
    """Every include under ROOT (an ansible/ tree) that enters a role's task file without a tag: those of
    the playbooks, the include of a role's main.yml and an include_role of another role. Where a playbook
    takes tags (not WHOLE_RUN), a dynamic include's tags must also reach the tasks it includes (apply, or
    the play's own tags)."""
    out: list[str] = []
    for book in sorted(root.glob("*.yml")):
        for play in yaml.safe_load(book.read_text()):
            for task in _tasks(play.get("pre_tasks", []) + play.get("tasks", []) + play.get("post_tasks", [])):
                found = _include(task)
                if found is None:
                    continue
                action, args = found
                where = f"{book.name}: {task.get('name')} ({args.get('name')} {args.get('tasks_from', 'main')})"
                applied = _tags(args.get("apply") or {})
                if not (_tags(play) | _tags(task)):
                    out.append(f"{where}: no tag")
                elif book.stem not in WHOLE_RUN and action.startswith("include_") and not (_tags(play) or applied):
                    out.append(f"{where}: its tags reach no task of the file it includes (apply: tags: ...)")
    for role in sorted(p for p in (root / "roles").iterdir() if (p / "tasks").is_dir()):
        for path in sorted((role / "tasks").glob("*.yml")):
            for task in _tasks(yaml.safe_load(path.read_text())):
                found = _include(task)
                other_role = found is not None and found[1].get("name", role.name) != role.name
                if found is not None and (path.stem == "main" or other_role) and not _tags(task):
                    out.append(f"roles/{role.name}/tasks/{path.name}: {task.get('name')}: no tag")
    return out


def test_every_task_file_the_playbooks_enter_is_reached_through_a_tagged_include(tmp_path: Path) -> None:
    assert untagged_entries(ansible_dir()) == []
    copy = tmp_path / "ansible"
    shutil.copytree(ansible_dir(), copy, ignore=shutil.ignore_patterns("inventories", "library", "*_plugins"))
    status = copy / "status.yml"
    status.write_text(status.read_text().replace("        apply:\n          tags: [lb]\n", "", 1))
    deploy = copy / "roles" / "vfleet_node" / "tasks" / "deploy.yml"
    deploy.write_text(
        deploy.read_text().replace("        tasks_from: drain\n      tags: [lb]\n", "        tasks_from: drain\n", 1)
    )
    assert untagged_entries(copy) == [
        "status.yml: Read the balancer (vfleet_lb check): its tags reach no task of the file it includes "
        "(apply: tags: ...)",
        "roles/vfleet_node/tasks/deploy.yml: Drain the node (balancer first, then the requests in flight): no tag",
    ]


def _partial_run(book: str, *options: str, env_vars: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "-i", str(EXAMPLE), f"{book}.yml", *options],
        cwd=ansible_dir(),
        env={**env(), **(env_vars or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.parametrize(
    ("book", "options"),
    [
        # Tagging a gate `always` does not keep it: --skip-tags always (or untagged, tagged, all) skips it too.
        ("rollout", ["--skip-tags", "always"]),
        ("rollback", ["--skip-tags", "untagged"]),
        # A --tags that leaves the verify out would end a fleet verify green with nothing verified.
        ("verify", ["--tags", "lock"]),
        ("unlock", ["--start-at-task", "Release the lock"]),
        ("swap", ["--step"]),
        # Check mode runs no command task: every gate's `vfleet` call would be skipped and the run end green.
        ("rollout", ["--check"]),
    ],
)
def test_a_playbook_that_locks_the_fleet_runs_whole_or_not_at_all(book: str, options: list[str]) -> None:
    rc, out = _partial_run(book, *options)
    assert rc != 0, out
    assert f"{book}.yml runs whole: " in out, out[-2000:]
    assert "Nothing has been touched." in out
    assert "TASK [" not in out, "a task ran before the refusal"


def test_tags_from_the_environment_are_refused_and_listing_is_not() -> None:
    rc, out = _partial_run("rollout", env_vars={"ANSIBLE_SKIP_TAGS": "verify"})
    assert rc != 0 and "rollout.yml runs whole: --skip-tags verify (ANSIBLE_SKIP_TAGS)" in out, out[-2000:]
    assert "TASK [" not in out
    rc, out = _partial_run("rollout", "--list-tasks", "--skip-tags", "swap")
    assert rc == 0, out[-2000:]
    assert "Run the preflight checks TAGS: [preflight]" in out and "Deploy the canary" not in out


def test_every_playbook_that_locks_the_fleet_is_a_whole_run() -> None:
    """A new playbook that plans or locks a run must refuse partial runs too: in the hosts of its first play."""
    locking = set()
    for book in sorted(ansible_dir().glob("*.yml")):
        plays = yaml.safe_load(book.read_text())
        entered = {
            (found[1].get("name"), found[1].get("tasks_from"))
            for play in plays
            for task in _tasks(play.get("tasks", []))
            if (found := _include(task)) is not None
        }
        if entered & {("vfleet", "plan"), ("vfleet", "lock"), ("vfleet", "unlock")}:
            locking.add(book.stem)
        if book.stem in WHOLE_RUN:
            assert "lookup('vfleet_whole_run'" in str(plays[0].get("hosts")), f"{book.name}: its first play"
    assert locking | {"swap"} == set(WHOLE_RUN)


def cross_role_reads(roles_dir: Path) -> list[str]:
    """Every file of a role under ROLES_DIR that names another role's defaults or vars file."""
    roles = sorted(p.name for p in roles_dir.iterdir() if p.is_dir())
    out = []
    for role in roles:
        for path in sorted(p for p in (roles_dir / role).rglob("*") if p.is_file() and p.suffix != ".pyc"):
            text = path.read_text()
            for other in roles:
                found = re.search(rf"(?<![\w]){re.escape(other)}/(defaults|vars)/", text)
                if other != role and found:
                    out.append(f"{path.relative_to(roles_dir)}: reads role {other}'s {found[1]}")
    return out


def test_no_role_reads_another_roles_defaults(tmp_path: Path) -> None:
    assert cross_role_reads(ansible_dir() / "roles") == []
    copy = tmp_path / "roles"
    shutil.copytree(ansible_dir() / "roles", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "vfleet_lb" / "vars" / "main.yml").open("a") as f:
        f.write("x: \"{{ lookup('ansible.builtin.file', role_path ~ '/../vfleet_node/defaults/main.yml') }}\"\n")
    assert cross_role_reads(copy) == ["vfleet_lb/vars/main.yml: reads role vfleet_node's defaults"]


def test_the_controllers_vfleet_command_is_written_once() -> None:
    """The command behind every gate is the node role's vfleet_node_vfleet_cmd (vars/main.yml); a task that
    names the controller's vfleet itself would be a second place to change (and to get wrong)."""
    root = ansible_dir()
    named = sorted(str(p.relative_to(root)) for p in root.rglob("*.yml") if "ansible_playbook_python" in p.read_text())
    assert named == ["roles/vfleet_node/vars/main.yml"]
