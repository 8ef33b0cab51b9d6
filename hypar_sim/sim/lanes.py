"""Lanes: a resource of identical lanes (a link's, a cube's vault channels) whose requests
of one cycle are granted together, in an order that depends only on them (`sim.engine`)."""

from __future__ import annotations

import heapq


def _request_order(request: tuple) -> tuple[float, float]:
    return request[0], request[1]


class Lanes:
    """A resource of identical lanes; requests of one cycle are granted together."""

    __slots__ = ("free", "busy_cycles", "grants", "requests")

    def __init__(self, count: int) -> None:
        self.free = [0.0] * count  # a heap of the times the lanes are next free
        self.busy_cycles = 0.0  # lane-cycles held so far
        self.grants = 0  # requests served so far
        self.requests: list[tuple] = []  # this cycle's: (service, not_before, count, then)

    def serve(self, now: float, service: float, not_before: float,
              count: int = 1) -> tuple[float, float, float]:
        """`count` equal requests of `service` cycles each, asked at `now`, ending no earlier
        than `not_before`: they take the lanes that free first (all of them, sharing, when
        there are more requests than lanes) and start and finish together; (start, finish,
        when the lanes they hold are free again)."""
        free = self.free
        lanes = len(free)
        if count == 1:  # the common case: one lane, the first free
            start = free[0] if free[0] > now else now
            done = start + service
            if lanes == 1:
                free[0] = done
            else:
                heapq.heapreplace(free, done)
            self.busy_cycles += service
            self.grants += 1
            return start, not_before if not_before > done else done, done
        if count >= lanes:
            start = free[0] if lanes == 1 else max(free)
            used = lanes
            duration = service if count == lanes else service * count / lanes
        else:
            taken = [heapq.heappop(free) for _ in range(count)]
            start, used, duration = taken[-1], count, service
        if start < now:
            start = now
        done = start + duration
        if used == lanes:
            free[:] = [done] * lanes
        else:
            for _ in range(used):
                heapq.heappush(free, done)
        self.busy_cycles += used * duration
        self.grants += count
        return start, not_before if not_before > done else done, done

    def grant(self, now: float) -> list[tuple]:
        """Serve this cycle's requests, smaller first and equal ones together; returns
        (request, start, finish, when its lanes are free again) for each, nothing done with
        the grants yet."""
        requests, self.requests = self.requests, []
        if len(requests) == 1:
            request = requests[0]
            return [(request, *self.serve(now, request[0], request[1], request[2]))]
        requests.sort(key=_request_order)
        granted, first = [], 0
        while first < len(requests):
            service, not_before, count = requests[first][:3]
            last = first + 1
            while last < len(requests) and _request_order(requests[last]) == (service,
                                                                                not_before):
                count += requests[last][2]
                last += 1
            served = self.serve(now, service, not_before, count)
            granted += [(request, *served) for request in requests[first:last]]
            first = last
        return granted
