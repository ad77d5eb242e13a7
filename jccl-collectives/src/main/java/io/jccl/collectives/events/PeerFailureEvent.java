package io.jccl.collectives.events;

import jdk.jfr.Category;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR event {@code io.jccl.PeerFailure}: a rank learnt that a peer failed (its process died, it stopped running or
 * its link timed out, or it aborted its communicator) and failed its operation because of it. Committed on the
 * failure path only.
 */
@Name("io.jccl.PeerFailure")
@Label("JCCL Peer Failure")
@Category("JCCL")
@Description("A rank failed its operation because a peer died, timed out or aborted")
@StackTrace(false)
public final class PeerFailureEvent extends Event {
    /** {@link #reason} of a peer whose process is gone or whose link broke. */
    public static final String DIED = "died";
    /** {@link #reason} of a peer that stopped running or whose link timed out. */
    public static final String TIMEOUT = "timeout";
    /** {@link #reason} of a peer that aborted its communicator (or gave up because of another rank). */
    public static final String ABORT = "abort";

    @Label("Communicator")
    String communicator;

    @Label("Failed Rank")
    @Description("The rank that failed first, as far as this rank can tell")
    int failedRank;

    @Label("Detecting Rank")
    @Description("The rank that recorded this event")
    int detectingRank;

    @Label("Reason")
    @Description("died, timeout or abort")
    String reason;

    @Label("Message")
    String message;

    private PeerFailureEvent() {
    }

    /**
     * Creates an event and asks whether a recording wants it, committing nothing: what {@link #emit} costs the first
     * time in a JVM (JFR's event machinery loaded and linked, 30-80 ms on a loaded host) is paid here, by the
     * recovery rehearsal after creation, instead of on the failure path. Returns whether a recording is on.
     */
    public static boolean prepare() {
        return new PeerFailureEvent().shouldCommit();
    }

    /** Records a peer failure (when a recording asks for the event). */
    public static void emit(String communicator, int failedRank, int detectingRank, String message) {
        PeerFailureEvent event = new PeerFailureEvent();
        if (!event.shouldCommit()) {
            return;
        }
        event.communicator = communicator;
        event.failedRank = failedRank;
        event.detectingRank = detectingRank;
        event.reason = reasonOf(message);
        event.message = message;
        event.commit();
    }

    /**
     * {@link #ABORT}, {@link #TIMEOUT} or {@link #DIED} for a peer failure's message. The failure paths say which in
     * their words (an abort notice or status word: "aborted", "gave up"; a heartbeat that stood still: "has not
     * run for"; a link's retry limit: "timed out", "timeout", {@code RETRY_EXC_ERR}); anything else is a peer that
     * is gone.
     */
    public static String reasonOf(String message) {
        String m = message == null ? "" : message;
        if (m.contains("aborted") || m.contains("gave up") || m.contains("given up")) {
            return ABORT;
        }
        if (m.contains("has not run for") || m.contains("timed out") || m.contains("timeout")
            || m.contains("TIMEOUT") || m.contains("RETRY_EXC_ERR")) {
            return TIMEOUT;
        }
        return DIED;
    }
}
