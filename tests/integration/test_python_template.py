"""The `python` template carries what an agent expects in a Debian sandbox
(images/templates/python.sh): each tool is run for real inside one python
sandbox, doing a small piece of its actual job, not only --version."""

from harness import ApiError

# (what, command, check of the result): every check looks at real output
TOOLS = [
    ("ps (procps)", ["sh", "-c", "ps aux && ps -o pid= -p 1"],
     lambda r: r["stdout"].splitlines()[0].split()[:2] == ["USER", "PID"]
     and r["stdout"].splitlines()[-1].strip() == "1"),
    ("pip", ["pip", "--version"],
     lambda r: r["stdout"].startswith("pip ") and "python 3." in r["stdout"]),
    ("python3 -m pip", ["python3", "-m", "pip", "--version"],
     lambda r: r["stdout"].startswith("pip ")),
    # a venv with its own pip: test_network.py's pip test makes one and
    # installs a wheel with its pip (a venv costs a minute under TCG)
    ("venv module", ["python3", "-c", "import ensurepip, venv; print(ensurepip.version())"],
     lambda r: r["stdout"].strip().split(".")[0].isdigit()),
    ("less", ["sh", "-c", "printf 'one\\ntwo\\n' | less -FX"],
     lambda r: r["stdout"] == "one\ntwo\n"),
    ("unzip",
     ["sh", "-c", "python3 -c \"import zipfile; z = zipfile.ZipFile('/tmp/a.zip', 'w');"
      " z.writestr('x.txt', 'zipped'); z.close()\" && unzip -p /tmp/a.zip x.txt"],
     lambda r: r["stdout"] == "zipped"),
    ("jq", ["sh", "-c", "echo '{\"a\": [1, 2, 3]}' | jq -c '.a | add'"],
     lambda r: r["stdout"] == "6\n"),
    ("wget", ["wget", "--version"], lambda r: r["stdout"].startswith("GNU Wget")),
    ("file", ["file", "-L", "/bin/ls"], lambda r: "ELF 64-bit" in r["stdout"]),
    ("git",
     ["sh", "-c", "git init -q /tmp/r && cd /tmp/r && echo hi > f && git add f"
      " && git -c user.name=t -c user.email=t@example.com commit -q -m first && git log --format=%s"],
     lambda r: r["stdout"] == "first\n"),
    ("curl", ["curl", "--version"],
     lambda r: r["stdout"].startswith("curl ") and "https" in r["stdout"].split("Protocols:")[1].split()),
    ("CA bundle",
     ["python3", "-c", "import ssl; print(ssl.create_default_context().cert_store_stats()['x509_ca'])"],
     lambda r: int(r["stdout"]) > 100),
    ("CA bundle file", ["sh", "-c", "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt"],
     lambda r: int(r["stdout"]) > 100),
]


def test_python_template_tools(airlock):
    sid = airlock.create("python")["id"]
    failed = []
    for what, cmd, check in TOOLS:
        try:
            r = airlock.exec(sid, cmd, timeout_s=120)
        except ApiError as e:  # 404: no such program
            failed.append(f"{what}: {cmd!r} -> {e}")
            continue
        try:
            ok = r["exit_code"] == 0 and check(r)
        except (IndexError, ValueError):
            ok = False
        if not ok:
            failed.append(f"{what}: {cmd!r} -> exit {r['exit_code']}, stdout {r['stdout'][-300:]!r}, "
                          f"stderr {r['stderr'][-300:]!r}")
    assert not failed, "tools missing or broken in the python template:\n" + "\n".join(failed)
