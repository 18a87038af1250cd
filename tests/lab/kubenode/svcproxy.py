#!/usr/bin/env python3
"""Forward TCP connections from the ``kubernetes`` Service's address to the API server (kubelet node lanes).

In-cluster clients (config-manager, nfd-worker, nfd-master) are told KUBERNETES_SERVICE_HOST/PORT, the
Service's address; the lanes run no kube-proxy, so node.sh puts that address on lo and this forwards it.
Bytes pass through unchanged (TLS is end to end: the API server's certificate names 10.96.0.1).

    svcproxy.py --listen 10.96.0.1:443 --to 127.0.0.1:26543
"""
from __future__ import annotations

import argparse
import asyncio
import signal


def hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except RuntimeError:
            pass


async def main(args):
    to_host, to_port = hostport(args.to)

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.wait_for(asyncio.open_connection(to_host, to_port), timeout=10)
        except (OSError, asyncio.TimeoutError):
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw), pipe(sr, cw))

    host, port = hostport(args.listen)
    server = await asyncio.start_server(handle, host, port, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print("forwarding %s -> %s" % (args.listen, args.to), flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    asyncio.run(main(ap.parse_args()))
