package io.jccl.collectives.events;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR event {@code io.jccl.Collective}: one collective operation of one rank, from the moment it held its turn to
 * its end (the event's duration), with what it moved and how.
 *
 * <p>A communicator keeps one instance and reuses it for every operation (operations run one at a time, in issue
 * order): {@link #isEnabled()} first, {@link #begin()}/{@link #end()} around the operation, and the fields are set
 * only when {@link #shouldCommit()} says the event is recorded (duration threshold passed), so nothing is allocated
 * or timed while no recording asks for it.
 */
@Name("io.jccl.Collective")
@Label("JCCL Collective")
@Category("JCCL")
@Description("One collective operation of one rank: what it moved, with which algorithm and devices, and how long it"
    + " took")
@StackTrace(false)
public final class CollectiveEvent extends Event {
    @Label("Communicator")
    String communicator;

    @Label("Collective")
    @Description("allReduce, broadcast, reduce, allGather, reduceScatter, allToAll, gather, scatter, barrier,"
        + " sendRecv or window")
    String collective;

    @Label("Sequence")
    @Description("The operation's sequence number on the communicator (equal on every rank for collectives)")
    long sequence;

    @Label("Bytes")
    @Description("The operation's size as nccl-tests counts it (the vector, or all blocks for the gather family)")
    @DataAmount
    long bytes;

    @Label("Count")
    @Description("Elements per rank, as passed to the call")
    long count;

    @Label("Data Type")
    String dataType;

    @Label("Reduce Operator")
    String op;

    @Label("Algorithm")
    @Description("The algorithm the cost model (or JCCL_ALGO) chose, for example direct/inline, ring, tree")
    String algorithm;

    @Label("Transport")
    @Description("The devices this rank's communicator uses, and whether the direct (mapped memory) path is on")
    String transport;

    @Label("Rank")
    int rank;

    @Label("World Size")
    int worldSize;

    @Label("Succeeded")
    boolean succeeded;

    /** An event to reuse for every operation of one communicator. */
    public CollectiveEvent() {
    }

    /**
     * Fills the fields (call after {@link #end()} when {@link #shouldCommit()} says yes); {@code dataType} and
     * {@code op} may be null.
     */
    public void set(String communicator, String collective, long sequence, long bytes, long count, String dataType,
                    String op, String algorithm, String transport, int rank, int worldSize, boolean succeeded) {
        this.communicator = communicator;
        this.collective = collective;
        this.sequence = sequence;
        this.bytes = bytes;
        this.count = count;
        this.dataType = dataType;
        this.op = op;
        this.algorithm = algorithm;
        this.transport = transport;
        this.rank = rank;
        this.worldSize = worldSize;
        this.succeeded = succeeded;
    }
}
