"""The Redis permissions streamq needs, and the ``ACL SETUSER`` lines that grant them.

:data:`PERMISSIONS` lists every command streamq sends (with redis-py or hand-packed, and
inside its Lua scripts, which the server checks against the same ACL) and the keys or
channel it sends it on. It is the one source for the ``ACL SETUSER`` lines in the README
(:func:`acl_setuser`), for the tests that prove them sufficient, and for
:func:`~streamq.wire.permission_check.check_permissions`, which asks the server whether
the connected user may send each of them when a queue opens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .keys import Keys
from .partition_names import partition_streams

Use = Literal["open", "partition", "consume", "cleanup", "schedule", "ordered", "operate"]
SERVICE_USES: tuple[Use, ...] = ("open", "partition", "consume", "cleanup", "schedule", "ordered")
OPERATOR_USES: tuple[Use, ...] = (*SERVICE_USES, "operate")

# Placeholders in Permission.args, bound to one stream's names by names_for().
STREAM, DEAD_LETTERS, STOPPED, UNROUTED = "<stream>", "<dlq>", "<stopped>", "<unrouted>"
LOCK, MARK, CONTROL = "<cleanup-lock>", "<terminated>", "<control>"
PARTS = "<partitions>"
SCHEDULED, PAYLOADS, WAKE = "<scheduled>", "<scheduled-payloads>", "<scheduled-wake>"
PERIODIC, TICK = "<periodic>", "<periodic-tick>"
MEMBERS, LEASE, HALTED = "<members>", "<lease>", "<halted>"
ALIVE = "<consumer-claim>"
PAUSED, RATE, THROTTLE, FLOW = "<paused>", "<rate>", "<throttle>", "<flow>"
WAITING = "<waiting>"
# Group, consumer, entry ID and script SHA are not subject to the ACL: any value does.
G, C, ID, SHA = "g", "c", "0-1", "0" * 40
# Commands whose ACL name includes the subcommand ("xinfo|groups").
_CONTAINERS = frozenset({"ACL", "CLIENT", "SCRIPT", "XGROUP", "XINFO"})
# Not needed: redis-py names each connection (Redis >= 7.2, Valkey) and ignores a
# refusal, which the server records in ACL LOG. Not in the lines: Redis 7.0 lacks it.
CONNECT_COMMANDS = ("client|setinfo",)
# What check_permissions itself sends; optional in an ACL (without them it is skipped).
PROBE_COMMANDS = ("acl|whoami", "acl|dryrun")
# What every client sends once to learn whether the server is a cluster node and which
# node serves which slot (streamq.wire.routing), and which newer stream commands it has
# (streamq.wire.features). Refused, the server is taken for a single node without them.
# And ASKING, which a cluster client sends before a command on a slot being migrated
# (streamq.wire.asking); refused, such commands wait until the migration ends.
DISCOVERY_COMMANDS = ("asking", "cluster|slots", "command|docs")


@dataclass(frozen=True, slots=True)
class Permission:
    """One command streamq sends, as it sends it (placeholders for the stream's names).

    ``use``: ``open`` (MessageQueue opens and publishes), ``partition`` (the first open of
    a partitioned topic records its partitions), ``consume`` (a running consumer),
    ``cleanup`` (cleanup passes), ``schedule`` (publishing with ``delay=``/``at=``: not
    checked when a queue opens, a producer that never schedules does without it),
    ``operate`` (stop/resume/terminate, seek, topic_info,
    dead-letter replay and purge, the CLI). ``optional``: only on servers that have the
    command (XDELEX: Redis >= 8.2).
    """

    use: Use
    args: tuple[str, ...]
    why: str
    optional: bool = False

    @property
    def command(self) -> str:
        """The command's ACL name, e.g. ``xadd`` or ``xinfo|groups``."""
        name = self.args[0].upper()
        if name in _CONTAINERS:
            return f"{name}|{self.args[1]}".lower()
        return name.lower()

    def bind(self, names: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(names.get(arg, arg) for arg in self.args)

    def targets(self, names: Mapping[str, str]) -> list[str]:
        """The key and channel names this command touches."""
        return [names[arg] for arg in self.args if arg in names]


def _p(use: Use, why: str, *args: str, optional: bool = False) -> Permission:
    return Permission(use, args, why, optional)


PERMISSIONS: tuple[Permission, ...] = (
    _p("open", "create the consumer group", "XGROUP", "CREATE", STREAM, G, "$", "MKSTREAM"),
    _p("open", "publish", "XADD", STREAM, "*", "type", "t", "data", "0"),
    _p("open", "read the topic's partition count", "HGET", PARTS, "count"),
    _p("open", "send a publish again after an unknown outcome, checked (script)", "EVAL",
       "return 0", "1", STREAM),
    _p("open", "in the resend script: the server's clock", "TIME"),
    _p("open", "in the resend script: the stream's last entries", "XREVRANGE", STREAM, "+",
       "-", "COUNT", "1"),
    _p("partition", "record a new partitioned topic's count", "HSETNX", PARTS, "count", "2"),
    _p("partition", "record a new partitioned topic's streams", "HSETNX", PARTS, "names", "[]"),
    _p("schedule", "schedule a message (script)", "EVALSHA", SHA, "2", SCHEDULED, PAYLOADS),
    _p("schedule", "load a script the server lacks", "SCRIPT", "LOAD", "return 0"),
    _p("schedule", "in the scheduling script", "ZRANGE", SCHEDULED, "0", "0", "WITHSCORES"),
    _p("schedule", "in the scheduling script", "ZADD", SCHEDULED, "1", ID),
    _p("schedule", "in the scheduling script", "HSET", PAYLOADS, ID, "[]"),
    _p("schedule", "wake the movers for an earlier message", "SPUBLISH", WAKE, "1"),
    _p("consume", "in the move script", "ZRANGE", SCHEDULED, "-inf", "1", "BYSCORE"),
    _p("consume", "move due scheduled messages (script)", "EVALSHA", SHA, "4", SCHEDULED,
       PAYLOADS, STREAM, DEAD_LETTERS),
    _p("consume", "in the move script: the server's clock", "TIME"),
    _p("consume", "in the move script", "HGET", PAYLOADS, ID),
    _p("consume", "in the move and cancel scripts", "ZREM", SCHEDULED, ID),
    _p("consume", "in the move and cancel scripts", "HDEL", PAYLOADS, ID),
    _p("consume", "wake up for an earlier scheduled message", "SSUBSCRIBE", WAKE),
    _p("consume", "claim, renew or give up a periodic tick (script)", "EVALSHA", SHA, "2", TICK,
       PERIODIC),
    _p("consume", "publish a periodic tick with its claim (script)", "EVALSHA", SHA, "3", TICK,
       PERIODIC, STREAM),
    _p("consume", "in the periodic tick scripts", "GET", TICK),
    _p("consume", "in the periodic tick scripts", "SET", TICK, "t", "PX", "1000"),
    _p("consume", "in the periodic tick scripts", "SET", TICK, "t", "KEEPTTL"),
    _p("consume", "in the periodic tick scripts: a damaged claim", "DEL", TICK),
    _p("consume", "in the periodic tick scripts: the server's clock", "TIME"),
    _p("consume", "in the periodic tick scripts", "XADD", STREAM, "*", "type", "t", "data", "0"),
    _p("consume", "the last periodic tick; in the tick scripts", "HGET", PERIODIC, "name"),
    _p("consume", "record periodic publishers and ticks; in the tick scripts", "HSET", PERIODIC,
       "name", "1"),
    _p("consume", "in the periodic tick scripts", "HDEL", PERIODIC, "name:open:0"),
    _p("consume", "periodic ticks whose claimer died", "HGETALL", PERIODIC),
    _p("consume", "read entries", "XREADGROUP", "GROUP", G, C, "COUNT", "1", "BLOCK", "1",
       "STREAMS", STREAM, ">"),
    _p("consume", "acknowledge entries; in scripts", "XACK", STREAM, G, ID),
    _p("consume", "delivery counts, cleanup; in scripts", "XPENDING", STREAM, G, "-", "+", "1"),
    _p("consume", "claim idle entries", "XAUTOCLAIM", STREAM, G, C, "1", "0-0", "COUNT", "1"),
    _p("consume", "retries, lease renewal; in scripts", "XCLAIM", STREAM, G, C, "0", ID, "JUSTID"),
    _p("consume", "find consumers gone idle", "XINFO", "CONSUMERS", STREAM, G),
    _p("consume", "delete consumers gone idle", "XGROUP", "DELCONSUMER", STREAM, G, C),
    _p("consume", "health(), cleanup; in scripts", "XINFO", "GROUPS", STREAM),
    _p("consume", "auto-stop: was the stream deleted", "EXISTS", STREAM),
    _p("consume", "auto-stop: was the topic terminated, and when", "GET", MARK),
    _p("consume", "follow stop/resume/terminate notices", "SSUBSCRIBE", CONTROL),
    _p("consume", "load the stopped IDs", "HKEYS", STOPPED),
    _p("consume", "set a stopped entry aside (script)", "EVAL", "return 0", "2", STREAM, STOPPED),
    _p("consume", "confirm a stop/resume notice", "HEXISTS", STOPPED, ID),
    _p("consume", "in the stop scripts", "HGET", STOPPED, ID),
    _p("consume", "in the stop scripts", "HSET", STOPPED, ID, "{}"),
    _p("consume", "renew leases of running handlers (script)", "EVALSHA", SHA, "1", STREAM),
    _p("consume", "load a script the server lacks (EVALSHA falls back to it)",
       "SCRIPT", "LOAD", "return 0"),
    _p("consume", "dead-letter an entry", "XADD", DEAD_LETTERS, "*", "type", "t"),
    _p("consume", "count deliveries without a handler", "HINCRBY", UNROUTED, ID, "1"),
    _p("consume", "count deliveries without a handler", "HGET", UNROUTED, ID),
    _p("consume", "drop delivery counts; cleanup", "HDEL", UNROUTED, ID),
    _p("consume", "health(); the subscriptions' liveness", "PING"),
    _p("consume", "claim, renew and give back the consumer's name (scripts)", "EVALSHA", SHA, "1",
       ALIVE),
    _p("consume", "in the consumer name scripts", "GET", ALIVE),
    _p("consume", "in the consumer name scripts", "SET", ALIVE, "t", "PX", "1000"),
    _p("consume", "in the consumer name scripts", "DEL", ALIVE),
    _p("consume", "flow control: read the group's pause record (script)", "EVALSHA", SHA, "1",
       PAUSED),
    _p("consume", "in the pause-reading script", "TYPE", PAUSED),
    _p("consume", "in the pause-reading script", "HGETALL", PAUSED),
    _p("consume", "in the pause-reading script: the server's clock", "TIME"),
    _p("consume", "flow control: the pause record read with the consumer's waiting report "
       "(script)", "EVALSHA", SHA, "2", PAUSED, WAITING),
    _p("consume", "in the pause-reading script: the waiting reports", "TYPE", WAITING),
    _p("consume", "in the pause-reading script: the waiting reports", "HGETALL", WAITING),
    _p("consume", "in the pause-reading script: write or remove the consumer's report; "
       "remove stale ones", "HSET", WAITING, C, "{}"),
    _p("consume", "in the pause-reading script; a stopping consumer removes its report",
       "HDEL", WAITING, C),
    _p("consume", "in the pause-reading script: the reports expire", "PEXPIRE", WAITING, "1000"),
    _p("consume", "in the pause-reading script: a key of another type replaced", "DEL",
       WAITING),
    _p("consume", "flow control: follow pause notices", "SSUBSCRIBE", FLOW),
    _p("consume", "flow control: take rate-limit permits (script)", "EVALSHA", SHA, "1", RATE),
    _p("consume", "in the rate-limit script: the server's clock", "TIME"),
    _p("consume", "in the rate-limit script", "GET", RATE),
    _p("consume", "in the rate-limit script: a damaged state", "TYPE", RATE),
    _p("consume", "in the rate-limit script", "SET", RATE, "1", "PX", "1000"),
    _p("consume", "flow control: how long a key or type is throttled", "PTTL", THROTTLE),
    _p("consume", "flow control: throttle a key or type (script)", "EVALSHA", SHA, "1",
       THROTTLE),
    _p("consume", "in the throttle script", "SET", THROTTLE, "1000", "PX", "1000"),
    _p("ordered", "membership heartbeat (script)", "EVALSHA", SHA, "2", MEMBERS, STREAM),
    _p("ordered", "in the membership and lease scripts: is the topic there", "EXISTS", STREAM),
    _p("ordered", "in the membership script: is the partitioned topic there", "EXISTS", PARTS),
    _p("ordered", "in the membership script", "HGETALL", MEMBERS),
    _p("ordered", "in the membership script", "HSET", MEMBERS, C, "1"),
    _p("ordered", "in the membership script: a member leaving", "EXISTS", MEMBERS),
    _p("ordered", "a former ordered member opened unordered", "HDEL", MEMBERS, C),
    _p("ordered", "in the ownership scripts: the server's clock", "TIME"),
    _p("ordered", "leases, fenced reads, claims and acks (scripts)", "EVALSHA", SHA, "2", LEASE,
       STREAM),
    _p("ordered", "a partition's lease", "HMGET", LEASE, "consumer", "token", "expires"),
    _p("ordered", "take or renew a lease", "HSET", LEASE, "consumer", C),
    _p("ordered", "a new fencing token", "HINCRBY", LEASE, "token", "1"),
    _p("ordered", "release a lease", "HDEL", LEASE, "consumer"),
    _p("ordered", "is a lease there", "EXISTS", LEASE),
    _p("ordered", "failed entries' waits, for the next owner (fenced script)", "HGETALL", LEASE),
    _p("ordered", "a failed entry's wait (fenced script)", "HSET", LEASE, "due:1-0", "1"),
    _p("ordered", "a wait over (fenced script)", "HDEL", LEASE, "due:1-0"),
    _p("ordered", "wait for new entries", "XREAD", "COUNT", "1", "BLOCK", "1", "STREAMS", STREAM,
       "0"),
    _p("ordered", "in the fenced scripts", "XREVRANGE", STREAM, "+", "-", "COUNT", "1"),
    _p("ordered", "entries stopped by an operator", "HMGET", STOPPED, ID),
    _p("ordered", "at a takeover, the entries a stop holds (fenced script)", "HGETALL", STOPPED),
    _p("ordered", "at a takeover, the entries a stop holds (fenced script)", "XRANGE", STREAM,
       ID, ID),
    _p("ordered", "halted keys", "HGETALL", HALTED),
    _p("ordered", "halted keys", "HGET", HALTED, "k"),
    _p("ordered", "halted keys", "HMGET", HALTED, "k"),
    _p("ordered", "halted keys", "HSET", HALTED, "k", "{}"),
    _p("ordered", "halted keys", "HDEL", HALTED, "k"),
    _p("cleanup", "take the cleanup lock", "SET", LOCK, "t", "NX", "PX", "1000"),
    _p("cleanup", "release the cleanup lock (script)", "EVALSHA", SHA, "1", LOCK, "t"),
    _p("cleanup", "in the lock-release script", "GET", LOCK),
    _p("cleanup", "in the lock-release script", "DEL", LOCK),
    _p("cleanup", "stream length", "XLEN", STREAM),
    _p("cleanup", "list removable entries", "XRANGE", STREAM, "-", "+", "COUNT", "1"),
    _p("cleanup", "re-check and remove settled entries (script)", "EVALSHA", SHA, "2", STREAM,
       STOPPED),
    _p("cleanup", "in the cleanup script", "HLEN", STOPPED),
    _p("cleanup", "in the cleanup script", "HKEYS", STOPPED),
    _p("cleanup", "remove entries", "XTRIM", STREAM, "MINID", ID),
    _p("cleanup", "remove entries", "XDEL", STREAM, ID),
    _p("cleanup", "remove acknowledged entries (Redis >= 8.2)",
       "XDELEX", STREAM, "ACKED", "IDS", "1", ID, optional=True),
    _p("cleanup", "dead-letter retention", "XTRIM", DEAD_LETTERS, "MINID", ID),
    _p("cleanup", "prune delivery counts", "HKEYS", UNROUTED),
    _p("operate", "announce stop/resume/terminate", "SPUBLISH", CONTROL, "{}"),
    _p("operate", "resume (script)", "HDEL", STOPPED, ID),
    _p("operate", "terminate: one transaction", "MULTI"),
    _p("operate", "terminate: one transaction", "EXEC"),
    _p("operate", "terminate: mark the topic with the server's clock", "TIME"),
    _p("operate", "terminate: mark the topic", "SET", MARK, "1", "PX", "1000"),
    _p("operate", "terminate: delete every key", "DEL", STREAM, STOPPED, UNROUTED, DEAD_LETTERS),
    _p("operate", "pause a group or a type", "HSETNX", PAUSED, "*", "1"),
    _p("operate", "resume a group or a type", "HDEL", PAUSED, "*"),
    _p("operate", "announce a pause or a resume", "SPUBLISH", FLOW, "{}"),
    _p("operate", "terminate: delete the pause records", "DEL", PAUSED),
    _p("operate", "topic_info(): the waiting reports (script)", "EVALSHA", SHA, "1", WAITING),
    _p("operate", "seek()", "XGROUP", "SETID", STREAM, G, "$"),
    _p("operate", "topic_info(): XINFO STREAM without entry values (script)",
       "EVAL", "return 0", "1", STREAM),
    _p("operate", "in the topic_info() script", "XINFO", "STREAM", STREAM),
    _p("operate", "topic_info(), dead letters", "XLEN", DEAD_LETTERS),
    _p("operate", "dead letters", "EXISTS", DEAD_LETTERS),
    _p("operate", "list and replay dead letters", "XRANGE", DEAD_LETTERS, "-", "+"),
    _p("operate", "list dead letters cut to a size, download one (script)",
       "EVAL", "return 0", "1", DEAD_LETTERS),
    _p("operate", "replay dead letters", "XREVRANGE", DEAD_LETTERS, "+", "-", "COUNT", "1"),
    _p("operate", "replay a dead letter (script)", "EVAL", "return 0", "2", DEAD_LETTERS, STREAM),
    _p("operate", "in the replay script", "XDEL", DEAD_LETTERS, ID),
    _p("operate", "cancel a scheduled message (script)", "EVALSHA", SHA, "2", SCHEDULED,
       PAYLOADS),
    _p("operate", "topic_info(): scheduled messages", "ZCARD", SCHEDULED),
    _p("operate", "list scheduled messages: their payloads' first and last bytes (script)",
       "EVAL", "return 0", "1", PAYLOADS),
    _p("operate", "in the listing script", "HGET", PAYLOADS, ID),
    _p("operate", "halted keys a page at a time (dashboard, streamq halted list)", "HSCAN",
       HALTED, "0"),
    _p("operate", "terminate: delete the schedule", "DEL", SCHEDULED, PAYLOADS, PERIODIC),
    _p("operate", "terminate: delete ordered mode's membership and leases", "DEL", MEMBERS,
       LEASE),
    _p("operate", "streamq tail", "XREAD", "COUNT", "1", "STREAMS", STREAM, "0"),
    _p("operate", "streamq forget: the group's consumers", "XINFO", "CONSUMERS", STREAM, G),
    _p("operate", "streamq forget: delete a consumer without pending entries (script)",
       "EVAL", "return 0", "1", STREAM),
    _p("operate", "in the forget script", "XPENDING", STREAM, G, "-", "+", "1", C),
    _p("operate", "in the forget script", "XGROUP", "DELCONSUMER", STREAM, G, C),
    _p("operate", "streamq forget: the ordered membership record", "HDEL", MEMBERS, C),
)  # fmt: skip


def names_for(stream: str) -> dict[str, str]:
    """The placeholders of :data:`PERMISSIONS` bound to ``stream``'s key and channel names."""
    keys = Keys(stream)
    return {
        STREAM: stream,
        DEAD_LETTERS: keys.dead_letters,
        STOPPED: keys.stopped,
        UNROUTED: keys.unrouted,
        LOCK: keys.cleanup_lock,
        MARK: keys.prefix + "terminated",
        CONTROL: keys.control,
        PARTS: keys.partitions,
        SCHEDULED: keys.scheduled,
        PAYLOADS: keys.scheduled_payloads,
        WAKE: keys.scheduled_wake,
        PERIODIC: keys.periodic,
        TICK: keys.periodic + ":name:0",
        MEMBERS: keys.prefix + "members:" + G,
        LEASE: keys.prefix + "owner:" + G,
        HALTED: keys.halted,
        ALIVE: keys.consumer_claim(G, C),
        PAUSED: keys.paused(G),
        WAITING: keys.waiting(G),
        RATE: keys.rate(G, "t"),
        THROTTLE: keys.throttle(G, "t"),
        FLOW: keys.flow_notices,
    }


def required(uses: Iterable[Use]) -> list[Permission]:
    wanted = set(uses)
    return [p for p in PERMISSIONS if p.use in wanted]


def commands(uses: Iterable[Use], *, optional: bool = False) -> list[str]:
    """The ACL command names needed for ``uses``, sorted, without duplicates.

    ``optional``: with the commands only newer servers have (an ACL rule naming a
    command the server lacks is an error).
    """
    return sorted({p.command for p in required(uses) if optional or not p.optional})


def _glob_escape(name: str) -> str:
    # ACL key and channel patterns are globs: a literal *, ?, [ or \ needs a backslash
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in name)


def selectors(stream: str, partitions: int = 1) -> list[str]:
    """The key and channel rules for ``stream``: the stream, its own keys, its channel; for
    a topic of several ``partitions``, those of each partition stream too (named one by
    one: a pattern such as ``orders:p*`` would also grant other topics' streams)."""
    streams = [stream, *(partition_streams(stream, partitions) if partitions > 1 else ())]
    return [rule for name in streams for rule in _stream_selectors(name)]


def _stream_selectors(stream: str) -> list[str]:
    escaped = _glob_escape(stream)
    keys = Keys(stream)
    channels = [
        f"&{_glob_escape(keys.control)}", f"&{_glob_escape(keys.scheduled_wake)}",
        f"&{_glob_escape(keys.flow_notices)}",
    ]  # fmt: skip
    return [f"~{escaped}", f"~streamq:{{{escaped}}}:*", *channels]


def acl_rules(
    stream: str,
    *,
    operator: bool = False,
    password: str | None = None,
    probe: bool = True,
    newer: bool = False,
    partitions: int = 1,
) -> list[str]:
    """The ``ACL SETUSER`` rules (after the user name) for a service or an operator of
    ``stream`` (a topic of ``partitions``: its partition streams too).

    ``probe`` (default) adds the commands :func:`check_permissions` sends when a queue
    opens, so it can run (without them it is skipped, and each refused probe shows in
    ACL LOG); ``newer``
    the commands only newer servers know (XDELEX, CLIENT SETINFO: a rule naming a command
    the server lacks is refused).
    """
    names = commands(OPERATOR_USES if operator else SERVICE_USES, optional=newer)
    names += [*DISCOVERY_COMMANDS, *(CONNECT_COMMANDS if newer else ())]
    names += [*(PROBE_COMMANDS if probe else ())]
    secret = [] if password is None else [f">{password}"]
    # reset: no password, keys, channels or commands (-@all), then only these
    return ["reset", "on", *secret, "resetchannels", *selectors(stream, partitions)] + [
        f"+{name}" for name in sorted(names)
    ]


def acl_setuser(
    user: str,
    stream: str,
    *,
    operator: bool = False,
    password: str = "<password>",
    partitions: int = 1,
) -> str:
    """The ``ACL SETUSER`` line (one topic) as the README shows it."""
    rules = acl_rules(stream, operator=operator, password=password, partitions=partitions)
    return " ".join(["ACL SETUSER", user, *rules])
