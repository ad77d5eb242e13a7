package io.jccl.verbs;

/**
 * Which peers a device's queue pairs can connect to, asked of the {@link Device} before it is opened (NCCL's
 * transports answer {@code canConnect} the same way): collectives choose a device per peer from this and from
 * {@link LinkLayer}, never from the device's name, so a new provider plugs in without an edit to them.
 */
public enum Reach {
    /** Queue pairs of this process only (an in-process provider, such as a test double). */
    PROCESS,
    /** Processes of this host only: those with the same host identity (kernel boot id and host name), as shm. */
    HOST,
    /** Processes on any host the network reaches, as tcp and RoCE. */
    NETWORK
}
