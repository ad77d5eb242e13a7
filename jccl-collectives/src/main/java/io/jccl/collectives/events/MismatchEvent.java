package io.jccl.collectives.events;

import jdk.jfr.Category;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR event {@code io.jccl.Mismatch}: ranks called different operations (or counts, types, operators or roots) at
 * one sequence number, and this rank detected it. Committed on the failure path only.
 */
@Name("io.jccl.Mismatch")
@Label("JCCL Mismatch")
@Category("JCCL")
@Description("Ranks called different collectives at one sequence number")
@StackTrace(false)
public final class MismatchEvent extends Event {
    @Label("Communicator")
    String communicator;

    @Label("Rank")
    @Description("The rank that detected the mismatch")
    int rank;

    @Label("Local Operation")
    @Description("What this rank ran (its signature)")
    String local;

    @Label("Other Rank")
    @Description("The rank that ran something else (-1 when unknown)")
    int otherRank;

    @Label("Other Operation")
    @Description("What the other rank ran (its signature), or null when unknown")
    String other;

    @Label("Message")
    String message;

    private MismatchEvent() {
    }

    /** Records a mismatch (when a recording asks for the event). */
    public static void emit(String communicator, int rank, String local, int otherRank, String other,
                            String message) {
        MismatchEvent event = new MismatchEvent();
        if (!event.shouldCommit()) {
            return;
        }
        event.communicator = communicator;
        event.rank = rank;
        event.local = local;
        event.otherRank = otherRank;
        event.other = other;
        event.message = message;
        event.commit();
    }
}
