package io.jccl.spark;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TcpStore;
import io.jccl.common.Log;
import io.jccl.common.SecureIds;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.BarrierTaskInfo;
import org.apache.spark.TaskContext;
import org.apache.spark.util.TaskCompletionListener;

import java.util.HexFormat;

/**
 * A JCCL communicator for the tasks of a Spark barrier stage, one rank per task:
 * <pre>{@code
 * rdd.barrier().mapPartitions(rows -> {
 *     try (Communicator comm = SparkCommunicator.fromBarrierTask()) {
 *         ... comm.allReduce(gradient, gradient, n, DataType.FLOAT32, ReduceOp.SUM) ...
 *     }
 * })
 * }</pre>
 * Nothing else runs: the rank is the task's partition, the world size the number of tasks in the barrier, and the
 * task of partition 0 starts the job's rendezvous store (JCCL's {@link TcpStore}, on an ephemeral port of its
 * executor's address, with a secret drawn for this stage attempt) and tells the others its address and secret
 * through the barrier's own {@code allGather}. Providers are chosen as everywhere else: shm between tasks on one
 * host, tcp between hosts.
 *
 * <p>Failures: when a task of a barrier stage fails, Spark fails the stage attempt and relaunches all of its tasks.
 * Every attempt draws a new secret and starts a new store on a new port, and its job id names the stage and the
 * attempt, so a task of an earlier attempt can neither join nor read the new communicator. The communicator and the
 * store close when the task ends (successfully or not), and a watchdog closes them as soon as Spark marks the task
 * killed, so a task blocked in a collective whose peers are gone fails within JCCL's failure detection instead of
 * waiting out its timeout.
 */
public final class SparkCommunicator {
    /** Prefix of the message the tasks exchange, with its version. */
    static final String PROTOCOL = "jccl-spark/1";

    private SparkCommunicator() {
    }

    /** {@link #fromBarrierTask(CommunicatorOptions)} with the options of the executor's environment (JCCL_*). */
    public static Communicator fromBarrierTask() {
        return fromBarrierTask(CommunicatorOptions.fromEnvironment());
    }

    /**
     * A communicator of all tasks of the calling barrier task's stage; rank = partition id. Every task of the
     * barrier must call it (it is a collective call, like the barrier's own {@code allGather}).
     *
     * @throws IllegalStateException when called outside a Spark task, or in a task that is not part of a barrier
     *     stage
     */
    public static Communicator fromBarrierTask(CommunicatorOptions options) {
        BarrierTaskContext context = barrierContext();
        BarrierTaskInfo[] tasks = context.getTaskInfos();
        int size = tasks.length;
        int rank = context.partitionId();
        if (rank < 0 || rank >= size) {
            throw new IllegalStateException("barrier task of partition " + rank + " but " + size + " tasks in the "
                + "barrier: JCCL takes the partition id as the rank");
        }
        String jobId = "spark-stage" + context.stageId() + "-attempt" + context.stageAttemptNumber();
        TaskWatchdog.Registration registration = TaskWatchdog.watch(context);
        Store store = null;
        Communicator communicator = null;
        try {
            long timeoutNs = options.timeoutNs();
            String secret;
            if (rank == 0) {
                String host = hostOf(tasks[0].address());
                secret = HexFormat.of().formatHex(SecureIds.bytes(32));
                // Port 0: a fresh port per attempt, so nothing of an earlier attempt answers at the new address.
                TcpStore server = new TcpStore(host, 0, true, timeoutNs, secret, host);
                store = server;
                registration.closeOnKill(server);
                context.allGather(PROTOCOL + " " + host + " " + server.port() + " " + secret);
            } else {
                String[] messages = context.allGather(PROTOCOL + " -");
                String[] fields = messages[0].split(" ");
                if (fields.length != 4 || !fields[0].equals(PROTOCOL)) {
                    throw new IllegalStateException("partition 0 of stage " + context.stageId() + " sent '"
                        + (fields.length > 0 ? fields[0] : "") + "...' through allGather, not a " + PROTOCOL
                        + " store address: every task of the barrier must call SparkCommunicator.fromBarrierTask()"
                        + " at the same point, with the same jccl-spark version");
                }
                secret = fields[3];
                TcpStore client = new TcpStore(fields[1], Integer.parseInt(fields[2]), false, timeoutNs, secret);
                store = client;
                registration.closeOnKill(client);
            }
            communicator = Communicator.create(store, rank, size, options.withJobId(jobId).withAuthSecret(secret));
            registration.closeOnKill(communicator);
            Communicator comm = communicator;
            Store owned = store;
            context.addTaskCompletionListener((TaskCompletionListener) finished -> {
                registration.cancel();
                closeQuietly(comm, owned);
            });
            Log log = Log.get();
            if (log.enabled(Log.Level.INFO, Log.Subsys.INIT)) {
                log.info(rank, Log.Subsys.INIT, () -> "Spark barrier task: rank " + rank + " of " + size + ", stage "
                    + context.stageId() + " attempt " + context.stageAttemptNumber() + ", task attempt "
                    + context.attemptNumber());
            }
            return communicator;
        } catch (RuntimeException e) {
            registration.cancel();
            closeQuietly(communicator, store);
            if (registration.killed()) {
                throw new IllegalStateException("Spark killed task " + context.taskAttemptId() + " (partition "
                    + rank + ", stage " + context.stageId() + " attempt " + context.stageAttemptNumber() + ") while it "
                    + "joined the JCCL communicator: " + context.getKillReason().getOrElse(() -> "no reason given"), e);
            }
            throw e;
        }
    }

    /** The caller's barrier task context, or a clear error naming what to do instead. */
    static BarrierTaskContext barrierContext() {
        TaskContext task = TaskContext.get();
        if (task == null) {
            throw new IllegalStateException("SparkCommunicator.fromBarrierTask() was called outside a Spark task: call "
                + "it inside rdd.barrier().mapPartitions(...), where every partition's task runs at the same time");
        }
        if (!(task instanceof BarrierTaskContext barrier)) {
            throw new IllegalStateException("SparkCommunicator.fromBarrierTask() was called in task "
                + task.taskAttemptId() + " of stage " + task.stageId() + ", which is not a barrier stage: JCCL's ranks "
                + "must all run at once, so use rdd.barrier().mapPartitions(...) (Spark's barrier execution mode)");
        }
        return barrier;
    }

    /** The host of a barrier task's address ({@code host:port}, IPv6 hosts in brackets or not). */
    static String hostOf(String address) {
        String a = address.trim();
        if (a.startsWith("[")) {
            int close = a.indexOf(']');
            return close > 0 ? a.substring(1, close) : a;
        }
        int colon = a.lastIndexOf(':');
        if (colon > 0 && a.indexOf(':') == colon) {
            return a.substring(0, colon);
        }
        return a; // no port, or an IPv6 literal without brackets
    }

    private static void closeQuietly(Communicator communicator, Store store) {
        try {
            if (communicator != null) {
                communicator.close();
            }
        } catch (RuntimeException ignored) {
            // the task is ending; the store still has to go
        } finally {
            if (store != null) {
                store.close();
            }
        }
    }
}
