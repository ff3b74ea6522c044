"""Failed key checks in Redis, shared by every gateway: one Lua script per operation.

Each script reads Redis ``TIME`` and handles every subject of one attempt (its address and
its key prefix) in one atomic step, so gateways with skewed clocks agree and two gateways
never both spend a subject's last failure. The arithmetic is ``failures.py``'s: a hash
``{key_prefix}{kind}:{name}`` holds ``tokens`` and ``updated`` (Redis time, seconds), and
expires once it would be full again, so a subject with no recent failure costs no memory.
A key prefix is kept only as a short digest (``throttle.py``): nothing of a key is stored.

Every Redis failure (refused, timed out, protocol) is raised as ``FailureStoreUnavailable``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from headway import redis_client
from headway.gateway.auth.store import Failed, FailureStoreUnavailable, Subject
from headway.redis_client import REDIS_FAILURES, RedisEndpoint

# ARGV: rate and burst of each key in turn. Answers each key's wait, as a string (Redis
# truncates Lua numbers to integers).
_LOCKED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local out = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local fields = redis.call('HMGET', key, 'tokens', 'updated')
  local tokens = burst
  if fields[1] and fields[2] then
    tokens = math.min(burst, tonumber(fields[1]) + math.max(0, now - tonumber(fields[2])) * rate)
  end
  local wait = 0
  if tokens < 1 then wait = (1 - tokens) / rate end
  out[i] = string.format('%.17g', wait)
end
return out
"""

# ARGV: rate, burst and idle milliseconds of each key in turn. Answers, per key, its wait
# after this failure and 1 if this failure locked it (else 0).
_FAIL = """
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local out = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local fields = redis.call('HMGET', key, 'tokens', 'updated')
  local tokens = burst
  if fields[1] and fields[2] then
    tokens = math.min(burst, tonumber(fields[1]) + math.max(0, now - tonumber(fields[2])) * rate)
  end
  local was_locked = tokens < 1
  if not was_locked then tokens = tokens - 1 end
  redis.call('HSET', KEYS[i], 'tokens', string.format('%.17g', tokens),
             'updated', string.format('%.17g', now))
  redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
  local wait = 0
  if tokens < 1 then wait = (1 - tokens) / rate end
  out[2 * i - 1] = string.format('%.17g', wait)
  out[2 * i] = (wait > 0 and not was_locked) and 1 or 0
end
return out
"""


class RedisFailureStore:
    """Buckets of failed key checks in Redis, read and counted atomically on Redis time."""

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        *,
        timeout_s: float = 0.25,
        key_prefix: str = "headway:auth:",
    ) -> None:
        self._redis = redis_client.connect(endpoint, timeout_s)
        self._key_prefix = key_prefix
        self._locked = self._redis.register_script(_LOCKED)
        self._fail = self._redis.register_script(_FAIL)

    def key(self, subject: Subject) -> str:
        return self._key_prefix + subject.key

    async def locked_for(self, subjects: Sequence[Subject]) -> list[float]:
        args: list[float] = []
        for subject in subjects:
            args += [subject.limit.rate, float(subject.limit.failures)]
        keys = [self.key(subject) for subject in subjects]
        try:
            waits = await self._locked(keys=keys, args=args)
        except REDIS_FAILURES as exc:
            raise FailureStoreUnavailable(f"failed-auth check failed: {exc}") from exc
        return [float(wait) for wait in waits]

    async def fail(self, subjects: Sequence[Subject]) -> list[Failed]:
        args: list[float | int] = []
        for subject in subjects:
            idle_ms = math.ceil((subject.limit.idle_s + 1.0) * 1000.0)
            args += [subject.limit.rate, float(subject.limit.failures), idle_ms]
        keys = [self.key(subject) for subject in subjects]
        try:
            answer = await self._fail(keys=keys, args=args)
        except REDIS_FAILURES as exc:
            raise FailureStoreUnavailable(f"failed-auth count failed: {exc}") from exc
        return [Failed(float(answer[2 * i]), int(answer[2 * i + 1]) == 1) for i in range(len(keys))]

    async def close(self) -> None:
        await self._redis.aclose()
