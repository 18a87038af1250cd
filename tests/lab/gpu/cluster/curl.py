#!/usr/bin/env python3
"""The part of curl that tests/lab/cluster/up.sh uses (-fsS, -o FILE, --max-time, --cacert, --cert, --key, one
URL), for a machine without curl: GET the URL, body to stdout or -o, exit 22 on an HTTP error as curl -f does,
7 when nothing answers.  tests/lab/gpu/cluster.sh puts it on PATH only where curl is missing."""
import ssl
import sys
import urllib.error
import urllib.request


def main(argv):
    opts, url, i = {}, None, 0
    while i < len(argv):
        a = argv[i]
        if a in ("-o", "--max-time", "--cacert", "--cert", "--key"):
            opts[a] = argv[i + 1]
            i += 2
            continue
        if not a.startswith("-"):
            url = a
        i += 1
    ctx = None
    if url and url.startswith("https:"):
        ctx = ssl.create_default_context(cafile=opts.get("--cacert"))
        if "--cert" in opts:
            ctx.load_cert_chain(opts["--cert"], opts.get("--key"))
    try:
        with urllib.request.urlopen(url, timeout=float(opts.get("--max-time", 30)), context=ctx) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        sys.stderr.write("curl: (22) %s\n" % e)
        return 22
    except (OSError, ValueError) as e:
        sys.stderr.write("curl: (7) %s\n" % e)
        return 7
    if opts.get("-o") and opts["-o"] != "-":
        with open(opts["-o"], "wb") as f:
            f.write(body)
    else:
        sys.stdout.buffer.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
