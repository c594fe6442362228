"""Throughput and end-to-end latency of hastream nodes, measured through a real Kafka broker.

    python -m bench.throughput [--tuples N] [--quick] [--bootstrap HOST:PORT] [--profile]

Six processors move the same input (``reading`` tuples with the ``ht`` header, written by
``SourceWriter``) from one input topic to an output topic:

* ``bare``: a bare confluent-kafka loop (consume a batch, produce each message's value, key and
  headers, flush, commit): what one Python process can move at best, the baseline;
* ``avro``: the same loop doing the filter+map node's work by hand: decode each reading with the
  parsed schema, filter, map, encode, produce (no headers), as a Python application does with
  fastavro's public ``schemaless_reader``/``schemaless_writer`` (hastream's codec calls the
  functions they wrap, ``services.core.codec``);
* ``filter+map``: a ``NodeService`` running a filter that keeps every tuple and a map, like the
  demo's ingest node, so it writes as many tuples as the bare loop;
* ``window``: a ``NodeService`` running a keyed sliding-window aggregate;
* ``quix filter+map`` and ``quix window``: the same two as a Quix Streams application
  (``bench/quix_app.py``, in the virtualenv ``make peers`` builds under ``$HASTREAM_HOME/peers``,
  since Quix Streams pins an older confluent-kafka; its rows are skipped with a message without it).

Before any figure is quoted, the results of every processor's first run are decoded and compared
(``compare_outputs``): the Avro loop's and Quix's filter+map record for record with the node's,
each of Quix's windows with the window node's (Quix leaves the windows of the last event times
open, having no end of input). The goals (``check_goals``) are checked against the baselines of
the same run.

The nodes run the full Borealis DPC machinery of a failure-free deployment (one replica): input
SUnion, SOutput numbering, heartbeat and monitor threads, a persisted checkpoint every
``dpc.checkpoint_interval``. As a DPC source must, the input carries BOUNDARY tuples: one every
``dpc.boundary_interval`` of wall clock while it is written (``SourceWriter.maybe_boundary``) and a
final one at stime 2**62, so SUnion releases every bucket as STABLE. The bare loop copies the
boundaries like any message; a node consumes them and writes its own. Each run checks its
output topic: a node's results are its STABLE data tuples only (BOUNDARY is control), their ids
must be dense from 0, and any TENTATIVE, UNDO or REC_DONE tuple fails the benchmark (it would
mean boundaries were missing and SUnion timed out). A dead-lettered input fails it too.

Each processor runs in its own process (``--worker``, not part of the public interface), so the
harness's own work (pacing, progress) never competes with it for the GIL. The bare loop uses the
raw clients of ``BatchConsumer``/``BatchProducer`` (so exactly the nodes' client settings, whatever
they become) and the same ``HASTREAM_BATCH_SIZE``/``HASTREAM_POLL_TIMEOUT_MS``/``HASTREAM_LINGER_MS``,
so the comparison isolates what the node adds per tuple.

Definitions (also written to the JSON file):

* Every topic the benchmark creates uses ``message.timestamp.type=LogAppendTime``, so every
  timestamp below comes from the broker's clock when it appended the message.
* Throughput (phase 1, pre-loaded input): input data tuples / seconds from the moment the
  processor received its first batch to the end of its last batch (the later of its own stamp
  after producing the last batch and the append time of its last output message, which covers
  the final flush). Processor start-up is excluded; it is the median over ``--repeat`` runs.
  CPU per tuple is the worker process's CPU time (all its threads) per input data tuple.
* Latency (phase 2, input produced at a fixed ``--rate`` while the processor runs): per output
  data tuple, its append time minus the append time of the input tuple it came from. For the
  bare loop and the filter+map node that is the input with the same ``seq`` field; for the window
  node it is the input tuple that closed the window (the first one, in log order, whose event
  time is >= the window end; event time is the wall clock at generation, so windows close in real
  time). Inputs of the first second (warm-up) and after the source's last periodic boundary
  (released early by the final one) are not counted. A node with one input passes its stable
  tuples through as they arrive (``services.dpc.sunion``), so neither waits for a boundary: the
  window closes on the first tuple past its end, as Quix's does.
* DPC cost (phase 3, in process, no Kafka): CPU per tuple of SUnion and SOutput beside the
  operators themselves (``bench/dpc_cost.py``).

Results go to ``bench/results/throughput.json`` (figures plus machine info).

The package's modules: ``jobs`` (what a processor run is, and the JSON lines a worker reports),
``processors`` (the runs inside a worker), ``worker`` (the worker process, either side),
``check`` (reading and checking the output topics), ``phases`` (``Bench``: the three phases),
``run`` (the orchestration, goals and tables), ``plot`` and ``__main__`` (the command line).
The specs and readings are ``bench/workload.py``'s, the statistics ``bench/stats.py``'s.
"""
