# SPDX-License-Identifier: MIT
"""Counters of one emulated run, printable as a table."""


def _fmt_bytes(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def _table(headers, rows):
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(str(c)))

    def line(cells):
        return "  ".join(
            str(c).rjust(w) if isinstance(c, int) else str(c).ljust(w)
            for c, w in zip(cells, widths)
        )

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return out


class Stats:
    """What one run moved and called.

    bytes:           {(src_level, dst_level): bytes}   e.g. ("L3", "L2"); DMAs and channel
                     transfers together (a channel transfer counts at the get, from the
                     put's level; a broadcast counts once per receiving get)
    transfers:       {(src_level, dst_level): number of transfers}
    dma_ops:         number of air.dma_memcpy_nd executions
    channel_puts / channel_gets: executions of air.channel.put / .get
    kernel_calls:    {symbol: number of func.call executions}
    herd_executions: {herd name: executions of the whole herd}
    pe_executions:   herd executions x PEs per herd, summed
    launch_iterations, segment_iterations: body executions
    seconds:         wall time of the run
    uses_after_dealloc: accesses to a buffer after its memref.dealloc (allowed: aircc keeps
                     buffers static), first_use_after_dealloc says where the first one was
    """

    def __init__(self):
        self.bytes = {}
        self.transfers = {}
        self.dma_ops = 0
        self.channel_puts = 0
        self.channel_gets = 0
        self.kernel_calls = {}
        self.herd_executions = {}
        self.pe_executions = 0
        self.launch_iterations = 0
        self.segment_iterations = 0
        self.seconds = 0.0
        self.uses_after_dealloc = 0
        self.first_use_after_dealloc = None

    @property
    def total_kernel_calls(self):
        return sum(self.kernel_calls.values())

    def as_dict(self):
        return {
            "bytes": {f"{a}->{b}": v for (a, b), v in self.bytes.items()},
            "transfers": {f"{a}->{b}": v for (a, b), v in self.transfers.items()},
            "dma_ops": self.dma_ops,
            "channel_puts": self.channel_puts,
            "channel_gets": self.channel_gets,
            "kernel_calls": dict(self.kernel_calls),
            "herd_executions": dict(self.herd_executions),
            "pe_executions": self.pe_executions,
            "launch_iterations": self.launch_iterations,
            "segment_iterations": self.segment_iterations,
            "seconds": self.seconds,
            "uses_after_dealloc": self.uses_after_dealloc,
        }

    def table(self):
        lines = [f"Emulator counters ({self.seconds:.2f} s wall)"]
        order = {"L3": 0, "L2": 1, "L1": 2}
        rows = []
        for key in sorted(
            self.bytes, key=lambda k: (order.get(k[0], 9), order.get(k[1], 9))
        ):
            rows.append(
                (
                    f"{key[0]} -> {key[1]}",
                    self.transfers.get(key, 0),
                    self.bytes[key],
                    _fmt_bytes(self.bytes[key]),
                )
            )
        lines += _table(("data movement", "transfers", "bytes", ""), rows)
        lines.append("")
        lines.append(
            f"dma_memcpy_nd executions {self.dma_ops}, channel puts {self.channel_puts}, "
            f"channel gets {self.channel_gets}"
        )
        lines.append(
            f"launch iterations {self.launch_iterations}, segment iterations "
            f"{self.segment_iterations}, PE executions {self.pe_executions}"
        )
        if self.uses_after_dealloc:
            lines.append(
                f"note: {self.uses_after_dealloc} uses of buffers after their memref.dealloc "
                f"(aircc keeps buffers static, so they work; first: {self.first_use_after_dealloc})"
            )
        if self.herd_executions:
            lines.append("")
            lines += _table(
                ("herd", "executions"), sorted(self.herd_executions.items())
            )
        if self.kernel_calls:
            lines.append("")
            lines += _table(("kernel", "calls"), sorted(self.kernel_calls.items()))
        return "\n".join(lines)

    __str__ = table
