"""Render deploy/nginx.conf for a given site folder, port and scratch folder.

    conf = render_nginx_conf("dist", 8080, "/tmp/nginx-run")
    Path("/tmp/nginx-run/nginx.conf").write_text(conf)
    subprocess.Popen(nginx_command("/tmp/nginx-run/nginx.conf", "/tmp/nginx-run"))

The scratch folder gets the pid file, the logs and nginx's temp folders. When
nginx starts as root its workers run as "nobody", so the temp folders are made
world-writable here, and the site folder (with every folder above it) must be
world-readable for the workers to serve it.
"""
from __future__ import annotations

import os
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "deploy" / "nginx.conf"
TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
# Debian's libnginx-mod-http-brotli-static; the template's lines marked "brotli:" need it
BROTLI_MODULE = Path("/usr/share/nginx/modules/ngx_http_brotli_static_module.so")


def render_nginx_conf(root, port: int, tmp, host: str = "127.0.0.1", user: str | None = None,
                      brotli: bool | None = None) -> str:
    """The config text for serving `root` on host:port, with state under `tmp` (created).

    `user`: the account the workers run as when nginx starts as root (nginx's default is
    "nobody"); e.g. "root" to serve a folder under a private temporary directory in tests.
    `brotli`: keep the lines that need nginx's brotli module (default: when it is installed).
    """
    root, tmp = Path(root).resolve(), Path(tmp).resolve()
    for value in (str(root), str(tmp), host, user or ""):
        if any(c in value for c in ' ;{}"\'#$\n'):
            raise ValueError(f"{value!r}: nginx would need quoting for this path or host")
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o755)
    for name in TEMP_FOLDERS:
        (tmp / name).mkdir(exist_ok=True)
        os.chmod(tmp / name, 0o777)        # scratch for the workers, whoever they run as
    listen_host = f"[{host}]" if ":" in host else host
    text = TEMPLATE.read_text()
    if not (BROTLI_MODULE.exists() if brotli is None else brotli):
        text = "".join(line for line in text.splitlines(keepends=True) if "# brotli:" not in line)
    for placeholder, value in (("@ROOT@", str(root)), ("@TMP@", str(tmp)),
                               ("@HOST@", listen_host), ("@PORT@", str(int(port)))):
        text = text.replace(placeholder, value)
    if user:
        text = text.replace("daemon off;\n", f"daemon off;\nuser {user};\n", 1)
    return text


def nginx_command(conf, tmp, binary: str = "nginx") -> list[str]:
    """argv that runs nginx in the foreground with this config (-e: no default log path)."""
    tmp = Path(tmp).resolve()
    return [binary, "-c", str(Path(conf).resolve()), "-p", str(tmp), "-e", str(tmp / "error.log")]
