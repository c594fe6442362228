"""What the broker keeps of the logs schemes read back, as the topic settings a scheme's descriptor
(``services.spec.schemes``) gives its nodes' topics.
"""

from __future__ import annotations

# The logs a recovery reads back: a node's input logs are its backup queues (upstream backup replays
# them, passive standby replays them from a checkpoint) and its output logs are what a takeover
# continues. Only trimming (``services.log.trim``) may shorten them: time or size retention would
# delete tuples a recovery still needs, silently turning a rollback or precise recovery into gap
# recovery.
RECOVERY_LOG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}

# Level-1 acknowledgements (``services.ha.acks``), one key per primary: each primary's newest ack stays.
ACKS = {"cleanup.policy": "compact", "segment.ms": "60000"}

# The image store (``services.log.images``) writes an image in chunks of this size, far below the
# broker's and the consumers' limits on one message.
CHUNK_BYTES = 1024 * 1024
IMAGES = {
    "max.message.bytes": str(4 * CHUNK_BYTES),  # one chunk with its key and headers, compressed or not
    "cleanup.policy": "compact",  # the newest image per partition stays, however old
    "segment.ms": str(60_000),  # only closed segments are compacted: roll them often
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(60_000),
}
