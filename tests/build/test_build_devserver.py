"""The development server: Range, HEAD, ETag, MIME types, isolation and CORS headers,
precompressed files, no escapes."""
import http.client
import threading

import pytest

from buildtools.compress import gzip_bytes
from buildtools.devserver import make_server, parse_range

BODY = bytes(range(256)) * 4                  # 1024 bytes, every offset recognisable


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("devserver")
    (base / "secret.txt").write_text("outside the site")
    site = base / "site"
    (site / "sub").mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html><title>home</title>")
    (site / "data.bin").write_bytes(BODY)
    (site / "empty.bin").write_bytes(b"")
    for name in ("a.wasm", "a.mjs", "a.js", "a.whl", "a.safetensors", "a.json", "a.py", "a.css", "a.zip"):
        (site / name).write_bytes(b"x" * 10)
    (site / "sub" / "page.txt").write_text("in a folder")
    (site / "runtime.js").write_bytes(b"x" * 2000)
    (site / "runtime.js.gz").write_bytes(gzip_bytes(b"x" * 2000))       # as the build's compress step
    (site / "both.js").write_bytes(b"y" * 2000)
    (site / "both.js.gz").write_bytes(gzip_bytes(b"y" * 2000))
    (site / "both.js.br").write_bytes(b"brotli stand-in")                # served as is, never decoded here
    (site / ".build-state.json").write_text("{}")
    return site


def _start(root, isolation):
    server = make_server(root, isolation=isolation)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


@pytest.fixture(scope="module")
def server(root):
    server = _start(root, isolation=True)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def plain_server(root):
    server = _start(root, isolation=False)
    yield server
    server.shutdown()
    server.server_close()


def request(server, path, method="GET", **headers):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body


def test_whole_file(server):
    r, body = request(server, "/data.bin")
    assert r.status == 200 and body == BODY
    assert r.getheader("Content-Length") == "1024" and r.getheader("Accept-Ranges") == "bytes"
    assert r.getheader("Cache-Control") == "no-cache"
    assert r.getheader("Content-Encoding") is None


@pytest.mark.parametrize("header, first, last", [
    ("bytes=10-19", 10, 19),
    ("bytes=1000-", 1000, 1023),
    ("bytes=-24", 1000, 1023),
    ("bytes=1000-5000", 1000, 1023),          # an end past the file is clamped
    ("bytes=-5000", 0, 1023),                 # a suffix longer than the file is all of it
    ("bytes=0-0", 0, 0),
])
def test_single_ranges(server, header, first, last):
    r, body = request(server, "/data.bin", Range=header)
    assert r.status == 206
    assert r.getheader("Content-Range") == f"bytes {first}-{last}/1024"
    assert r.getheader("Content-Length") == str(last - first + 1)
    assert body == BODY[first:last + 1]


@pytest.mark.parametrize("header", ["bytes=1024-", "bytes=5000-6000", "bytes=-0"])
def test_unsatisfiable_range(server, header):
    r, _ = request(server, "/data.bin", Range=header)
    assert r.status == 416 and r.getheader("Content-Range") == "bytes */1024"


def test_empty_file_ranges(server):
    r, body = request(server, "/empty.bin")
    assert r.status == 200 and body == b"" and r.getheader("Content-Length") == "0"
    r, _ = request(server, "/empty.bin", Range="bytes=0-")
    assert r.status == 416 and r.getheader("Content-Range") == "bytes */0"


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "items=0-5", "bytes=5-2", "bytes=abc"])
def test_multi_or_invalid_ranges_get_the_whole_file(server, header):
    r, body = request(server, "/data.bin", Range=header)
    assert r.status == 200 and body == BODY and r.getheader("Content-Range") is None


def test_head(server):
    r, body = request(server, "/data.bin", method="HEAD")
    assert r.status == 200 and body == b"" and r.getheader("Content-Length") == "1024"
    r, body = request(server, "/data.bin", method="HEAD", Range="bytes=0-9")
    assert r.status == 206 and body == b"" and r.getheader("Content-Length") == "10"


def test_etag_and_if_none_match(server):
    r, _ = request(server, "/data.bin")
    etag = r.getheader("ETag")
    assert etag and etag.startswith('"')
    r, body = request(server, "/data.bin", **{"If-None-Match": etag})
    assert r.status == 304 and body == b"" and r.getheader("ETag") == etag
    r, _ = request(server, "/data.bin", **{"If-None-Match": '"other"'})
    assert r.status == 200


def test_if_range_with_a_stale_etag_sends_everything(server):
    etag = request(server, "/data.bin")[0].getheader("ETag")
    assert request(server, "/data.bin", Range="bytes=0-9", **{"If-Range": etag})[0].status == 206
    r, body = request(server, "/data.bin", Range="bytes=0-9", **{"If-Range": '"stale"'})
    assert r.status == 200 and body == BODY


@pytest.mark.parametrize("name, mime", [
    ("a.wasm", "application/wasm"), ("a.mjs", "text/javascript"), ("a.js", "text/javascript"),
    ("a.whl", "application/octet-stream"), ("a.safetensors", "application/octet-stream"),
    ("a.zip", "application/octet-stream"), ("a.json", "application/json"), ("a.css", "text/css"),
    ("a.py", "text/x-python"), ("index.html", "text/html"),
])
def test_mime_types(server, name, mime):
    r, _ = request(server, f"/{name}")
    assert r.getheader("Content-Type").split(";")[0] == mime


def test_isolation_headers(server, plain_server):
    """COOP/COEP on every response; CORP keeps HTML documents to our origin and lets any origin
    embed the rest (wasm, wheels, weights, JSON, scripts, errors)."""
    etag = request(server, "/index.html")[0].getheader("ETag")
    for path, headers, policy in [("/index.html", {}, "same-origin"), ("/", {}, "same-origin"),
                                  ("/index.html", {"If-None-Match": etag}, "same-origin"),
                                  ("/a.wasm", {}, "cross-origin"), ("/a.whl", {}, "cross-origin"),
                                  ("/a.json", {}, "cross-origin"), ("/a.js", {}, "cross-origin"),
                                  ("/data.bin", {"Range": "bytes=0-9"}, "cross-origin"),
                                  ("/missing", {}, "cross-origin")]:
        r, _ = request(server, path, **headers)
        assert r.getheader("Cross-Origin-Opener-Policy") == "same-origin", path
        assert r.getheader("Cross-Origin-Embedder-Policy") == "require-corp", path
        assert r.getheader("Cross-Origin-Resource-Policy") == policy, (path, headers)
    for path in ("/index.html", "/a.wasm"):
        r, _ = request(plain_server, path)
        assert r.status == 200
        for name in ("Cross-Origin-Opener-Policy", "Cross-Origin-Embedder-Policy", "Cross-Origin-Resource-Policy"):
            assert r.getheader(name) is None, (path, name)


CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
        "Access-Control-Allow-Headers": "Range",
        "Access-Control-Expose-Headers": "Content-Range, Content-Length, Accept-Ranges, ETag"}


@pytest.mark.parametrize("path, headers, status", [
    ("/a.whl", {}, 200), ("/data.bin", {"Range": "bytes=0-9"}, 206), ("/data.bin", {"Range": "bytes=5000-"}, 416),
    ("/index.html", {}, 200), ("/missing", {}, 404), ("/a.wasm", {"Accept-Encoding": "gzip"}, 200),
])
def test_cors_headers_on_every_response(server, plain_server, path, headers, status):
    """Another origin may fetch any file by Range and read the headers the loader checks; a
    server without isolation headers still sends CORS (a static host's usual answer)."""
    for host in (server, plain_server):
        r, _ = request(host, path, Origin="http://127.0.0.1:1", **headers)
        assert r.status == status
        assert {name: r.getheader(name) for name in CORS} == CORS, path


def test_preflight(server):
    r, body = request(server, "/data.bin", method="OPTIONS", Origin="http://127.0.0.1:1",
                      **{"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"})
    assert r.status == 204 and body == b""
    assert {name: r.getheader(name) for name in CORS} == CORS
    assert r.getheader("Access-Control-Max-Age") == "86400"
    assert r.getheader("Cross-Origin-Resource-Policy") == "cross-origin"
    r, _ = request(server, "/data.bin", Range="bytes=0-1,4-5", Origin="http://127.0.0.1:1")
    assert r.status == 200 and r.getheader("Access-Control-Max-Age") is None        # only on preflights


def test_index_and_no_listing(server):
    r, body = request(server, "/")
    assert r.status == 200 and b"<title>home</title>" in body
    assert request(server, "/sub/")[0].status == 404          # a folder without index.html: no listing
    assert request(server, "/sub")[0].status == 404
    assert request(server, "/sub/page.txt")[0].status == 200
    assert request(server, "/nothing.bin")[0].status == 404
    assert request(server, "/index.html?v=3")[0].status == 200
    assert request(server, "/.build-state.json")[0].status == 404


@pytest.mark.parametrize("path", ["/../secret.txt", "/sub/../../secret.txt", "/%2e%2e/secret.txt",
                                  "/..%2fsecret.txt", "/sub/%2e%2e/%2e%2e/secret.txt", "//etc/passwd",
                                  "/..\\secret.txt", "/%00", "/%ff"])
def test_no_path_traversal(server, path):
    r, body = request(server, path)
    assert r.status == 404 and b"outside the site" not in body


def test_keep_alive_connection_serves_several_requests(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    for header in ("bytes=0-3", "bytes=4-7"):
        conn.request("GET", "/data.bin", headers={"Range": header})
        r = conn.getresponse()
        assert r.status == 206 and len(r.read()) == 4
    conn.close()


def test_parse_range_cases():
    assert parse_range(None, 10) is None
    assert parse_range("bytes=2-4", 10) == (2, 4)
    assert parse_range("bytes=-3", 10) == (7, 9)
    assert parse_range("bytes=10-", 10) == "unsatisfiable"


def test_precompressed_copy(server):
    """runtime.js.gz answers for runtime.js when gzip is accepted and the whole file is asked for."""
    import gzip
    r, body = request(server, "/runtime.js", **{"Accept-Encoding": "gzip, deflate, br"})
    assert r.status == 200 and r.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body) == b"x" * 2000 and int(r.getheader("Content-Length")) == len(body) < 2000
    assert r.getheader("Content-Type").startswith("text/javascript") and "Accept-Encoding" in r.getheader("Vary")
    encoded_etag = r.getheader("ETag")
    for headers in ({}, {"Accept-Encoding": "identity"}, {"Accept-Encoding": "gzip;q=0, br"},
                    {"Accept-Encoding": "gzip", "Range": "bytes=0-9"}):
        r, body = request(server, "/runtime.js", **headers)
        assert r.getheader("Content-Encoding") is None, headers
        assert body == b"x" * (10 if "Range" in headers else 2000)
        assert r.getheader("ETag") != encoded_etag          # a cache never mixes the two bodies
    r, body = request(server, "/data.bin", **{"Accept-Encoding": "gzip"})     # no .gz beside it
    assert r.getheader("Content-Encoding") is None and body == BODY


def test_brotli_copy_first(server):
    r, body = request(server, "/both.js", **{"Accept-Encoding": "gzip, deflate, br"})
    assert r.getheader("Content-Encoding") == "br" and body == b"brotli stand-in"
    r, body = request(server, "/both.js", **{"Accept-Encoding": "gzip, br;q=0"})
    assert r.getheader("Content-Encoding") == "gzip"
    r, body = request(server, "/runtime.js", **{"Accept-Encoding": "br"})          # no .br: the stored file
    assert r.getheader("Content-Encoding") is None and body == b"x" * 2000
