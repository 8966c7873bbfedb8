"""Flow control: rate limits held on the server, throttles a handler asks for, and pausing
a group or a type (docs/guides/flow-control.md).

What lives here works without a running consumer: the limit's definition
(:mod:`.rate`), the server-side limiter (:mod:`.limiter`), throttle records
(:mod:`.throttle`), the pause record (:mod:`.pause`) and a running consumer's view of it
(:mod:`.watch`), the waiting counts each running consumer reports on the watch's reads
and ``topic_info()`` sums (:mod:`.waiting`), the limits of a queue's types
(:mod:`.settings`), and :class:`.gate.FlowGate`, the one object through which the consumer
engine asks all of them.
"""
