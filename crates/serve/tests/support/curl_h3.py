"""libcurl over HTTP/3 only (curl_cffi's build of libcurl, with ngtcp2 and nghttp3; PyPI),
against 127.0.0.1:PORT: N requests to PATH on one handle (its connection reused), then M
POSTs of BODY bytes. Prints what came back as JSON: answers with status 200 and the whole
body, the HTTP version libcurl used, the bytes read.

Usage: curl_h3.py PORT PATH N BODY_LEN M
"""

import json
import sys
from io import BytesIO

from curl_cffi import Curl, CurlHttpVersion, CurlInfo, CurlOpt


def main():
    port, path, n, body_len, m = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    url = f"https://127.0.0.1:{port}{path}".encode()
    c = Curl()
    ok, read, versions = 0, 0, set()
    for i in range(n + m):
        out = BytesIO()
        c.setopt(CurlOpt.URL, url)
        c.setopt(CurlOpt.HTTP_VERSION, CurlHttpVersion.V3ONLY)
        c.setopt(CurlOpt.SSL_VERIFYPEER, 0)
        c.setopt(CurlOpt.SSL_VERIFYHOST, 0)
        c.setopt(CurlOpt.TIMEOUT_MS, 5000)
        c.setopt(CurlOpt.WRITEDATA, out)
        if i >= n:
            c.setopt(CurlOpt.POSTFIELDS, b"b" * body_len)
        c.perform()
        read += len(out.getvalue())
        versions.add(c.getinfo(CurlInfo.HTTP_VERSION))
        ok += c.getinfo(CurlInfo.RESPONSE_CODE) == 200
    c.close()
    # CURL_HTTP_VERSION_3 is 30.
    print(json.dumps({"ok": ok, "read": read, "versions": sorted(versions)}))


if __name__ == "__main__":
    main()
