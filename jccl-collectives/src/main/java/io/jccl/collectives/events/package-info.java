/**
 * JDK Flight Recorder events of the collectives, category "JCCL": {@code io.jccl.Collective} (one per operation,
 * with its duration), {@code io.jccl.PeerFailure} and {@code io.jccl.Mismatch}; the verbs layer adds
 * {@code io.jccl.QueuePairError}. Free while no recording asks for them: the communicator begins its one reusable
 * {@link io.jccl.collectives.events.CollectiveEvent} only when the event is enabled. Record with
 * {@code -XX:StartFlightRecording} or {@code jcmd PID JFR.start}; docs/observability.md lists the fields.
 */
package io.jccl.collectives.events;
