#!/usr/bin/env python3
"""Slow readers against `quarry serve` (driven by bench/slow_readers.sh; see there).

    slow_readers.py HOST PORT PID PATH SMALL --readers N --addresses A --seconds S --step B --every E

N clients from A loopback addresses (127.0.0.10 on) each ask for PATH and then read B bytes
every E seconds, with a small receive buffer (as a slow link keeps it); a client the server
closes connects again (the attack goes on as long as it runs). Once a second, from 127.0.0.1,
on new connections: /healthz and a GET of the small file SMALL, each timed (the whole answer), and
the server's VmRSS (from /proc/PID/status). Prints one line per second and a summary.
"""

import argparse
import asyncio
import socket
import statistics
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def connect(host, port, source):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    sock.bind((source, 0))
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return await asyncio.open_connection(sock=sock)


class Counts:
    def __init__(self):
        self.open = 0
        self.cut = 0
        self.failed = 0
        self.received = 0


async def reader(args, source, counts, stop):
    while not stop.is_set():
        try:
            r, w = await connect(args.host, args.port, source)
        except OSError:
            counts.failed += 1
            await asyncio.sleep(1)
            continue
        counts.open += 1
        try:
            w.write(f"GET /{args.path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await w.drain()
            while not stop.is_set():
                data = await r.read(args.step)
                if not data:
                    break
                counts.received += len(data)
                try:
                    await asyncio.wait_for(stop.wait(), args.every)
                except asyncio.TimeoutError:
                    pass
        except OSError:
            pass
        finally:
            counts.open -= 1
            w.close()
        if not stop.is_set():
            counts.cut += 1


async def timed(host, port, request, limit):
    """Seconds until the whole response to `request` on a new connection (None: not in `limit`)."""
    started = time.monotonic()
    try:
        async def ask():
            r, w = await connect(host, port, "127.0.0.1")
            w.write(request)
            await w.drain()
            head = await r.read()
            w.close()
            return head
        head = await asyncio.wait_for(ask(), limit)
    except (asyncio.TimeoutError, OSError):
        return None
    if not head.startswith(b"HTTP/1.1 200"):
        return None
    return time.monotonic() - started


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("pid", type=int)
    p.add_argument("path")
    p.add_argument("small")
    p.add_argument("--readers", type=int, default=1000)
    p.add_argument("--addresses", type=int, default=1)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--step", type=int, default=512)
    p.add_argument("--every", type=float, default=5)
    args = p.parse_args()

    counts = Counts()
    stop = asyncio.Event()
    base_rss = rss_mib(args.pid)
    tasks = [
        asyncio.create_task(reader(args, f"127.0.0.{10 + i % args.addresses}", counts, stop))
        for i in range(args.readers)
    ]
    health = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    small = f"GET /{args.small} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    limit = 30.0
    samples = []
    started = time.monotonic()
    print("   t  open  cut  healthz_s  small_get_s  rss_mib", flush=True)
    while time.monotonic() - started < args.seconds:
        tick = time.monotonic()
        h, g = await asyncio.gather(timed(args.host, args.port, health, limit), timed(args.host, args.port, small, limit))
        rss = rss_mib(args.pid)
        samples.append((h, g, rss))
        show = lambda s: f"{s:9.3f}" if s is not None else f"  >{limit:.0f}   "
        print(f"{tick - started:4.0f} {counts.open:5d} {counts.cut:4d}  {show(h)}  {show(g)}    {rss:6.0f}", flush=True)
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)

    def summary(values):
        answered = [v for v in values if v is not None]
        missed = len(values) - len(answered)
        if not answered:
            return f"none answered within {limit:.0f} s ({missed} probes)"
        return (f"median {statistics.median(answered):.3f} s, max {max(answered):.3f} s, "
                f"{missed} of {len(values)} not within {limit:.0f} s")

    print()
    print(f"readers: {args.readers} from {args.addresses} address(es), {args.step} bytes every {args.every} s, "
          f"{args.seconds:.0f} s; connections the server closed: {counts.cut}; connects failed: {counts.failed}")
    print(f"/healthz: {summary([s[0] for s in samples])}")
    print(f"small GET: {summary([s[1] for s in samples])}")
    print(f"server RSS: {base_rss:.0f} MiB before, max {max(s[2] for s in samples):.0f} MiB, "
          f"last {samples[-1][2]:.0f} MiB")


asyncio.run(main())
