package io.jccl.verbs.spi;

import jdk.jfr.Category;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR event {@code io.jccl.QueuePairError}: a queue pair entered the ERROR state (a failed work request, a broken
 * link, or an explicit modify). Committed on the error path only, so it costs nothing while queue pairs work; its
 * fields are what {@code ibv_async_event} and a completion's status would say.
 */
@Name("io.jccl.QueuePairError")
@Label("Queue Pair Error")
@Category({"JCCL", "Verbs"})
@Description("A JCCL queue pair entered the ERROR state")
@StackTrace(false)
public final class QueuePairErrorEvent extends Event {
    @Label("Device")
    @Description("The device (provider port) of the queue pair, for example shm0 or tcp0")
    String device;

    @Label("QP Number")
    int queuePairNumber;

    @Label("Destination QP Number")
    int destinationQueuePairNumber;

    @Label("Reason")
    @Description("The work completion status that failed it, or what moved it to ERROR")
    String reason;

    @Label("Previous State")
    String previousState;

    @Label("New State")
    String newState;

    /** Records that queue pair {@code qpn} of {@code device} went from {@code previous} to ERROR ({@code reason}). */
    static void emit(String device, int qpn, int destinationQpn, String reason, String previous) {
        QueuePairErrorEvent event = new QueuePairErrorEvent();
        if (!event.shouldCommit()) {
            return;
        }
        event.device = device;
        event.queuePairNumber = qpn;
        event.destinationQueuePairNumber = destinationQpn;
        event.reason = reason;
        event.previousState = previous;
        event.newState = "ERROR";
        event.commit();
    }
}
