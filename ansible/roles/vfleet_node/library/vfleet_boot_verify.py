#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""Run boot-verify on the controller and hand it the fleet's API key through an in-memory pipe.

The key never touches a disk or a command line: the module writes `VLLM_API_KEY=...` into a pipe and
runs the command with `--env-file /dev/fd/N`, N being the pipe's read end, inherited by the child alone.
When the controller dies mid-run the pipe dies with it; there is no key file left to clean up. (The
role used to write a 0600 key file and remove it in an `always:`, which a killed controller skips.)
The module's own arguments reach it on stdin (ansible.cfg sets pipelining), and `api_key` is a no_log
option: Ansible prints it masked at every verbosity and masks it in the result.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_boot_verify
short_description: Run vfleet verify (or a test fleet's stand-in) with the API key on a pipe
options:
  argv:
    description: The command line, without the key. With O(api_key), C(--env-file /dev/fd/N) is added.
    type: list
    elements: str
    required: true
  api_key:
    description: The fleet's API key; empty for a fleet without one.
    type: str
    default: ""
  timeout:
    description: Seconds the command may run.
    type: float
    default: 3600
author: vfleet
"""

RETURN = r"""
rc:
  description: The command's exit status.
  returned: always
  type: int
stdout:
  description: What it printed (stdout and stderr together, in order).
  returned: always
  type: str
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule

KEY_VAR = "VLLM_API_KEY"


def run(argv, api_key, timeout):
    """(rc, output) of ARGV, with API_KEY readable once on an inherited pipe when given."""
    pass_fds = ()
    read_end = None
    if api_key:
        read_end, write_end = os.pipe()
        payload = f"{KEY_VAR}={api_key}\n".encode()
        # A pipe holds at least 4 KiB (64 KiB on Linux) before a write blocks; a key is far smaller.
        os.write(write_end, payload)
        os.close(write_end)
        argv = [*argv, "--env-file", f"/dev/fd/{read_end}"]
        pass_fds = (read_end,)
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=timeout,
            pass_fds=pass_fds,
            check=False,
        )
        return proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out + f"\nboot-verify did not finish within {timeout:.0f} s"
    except OSError as exc:
        return 127, f"cannot run {argv[0]}: {exc.strerror}"
    finally:
        if read_end is not None:
            os.close(read_end)


def main():
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "float", "default": 3600},
        },
    )
    p = module.params
    rc, out = run(p["argv"], p["api_key"], p["timeout"])
    if rc != 0:
        module.fail_json(msg=f"boot-verify failed (exit {rc})", rc=rc, stdout=out, stdout_lines=out.splitlines())
    module.exit_json(changed=False, rc=rc, stdout=out, stdout_lines=out.splitlines())


if __name__ == "__main__":
    main()
