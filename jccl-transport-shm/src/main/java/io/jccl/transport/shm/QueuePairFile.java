package io.jccl.transport.shm;

/**
 * Layout of a queue-pair file {@code jccl-<pid>-<random>-qp}. The owner writes the header and produces receive
 * descriptors; the connected peer (the only sender of an RC QP) claims descriptors by CAS on the head, writes the
 * message straight into the described buffers, fills the result fields and release-stores {@code done}.
 *
 * <pre>
 * 0    magic u64 ("JCCLQPX1")
 * 8    state u32        shared state word (S_* below): the peer reads it before each request and sets S_ERR
 *                       on a responder-side violation; the owner notices at its next post/poll
 * 12   access u32       qp_access_flags
 * 16   min_rnr u32      min_rnr_timer code the sender waits after finding no receive
 * 20   qpn u32
 * 24   owner pid u64
 * 32   token u64        random; must match the endpoint a peer connects with
 * 40   rq depth u32 | 44 max recv sge u32 | 48 entry size u32
 * 56   protection-domain id u64: a one-sided request may only name regions of this domain
 * 64   rq tail u64      (own cache line) owner: next descriptor index, release-stored after the descriptor
 * 128  rq head u64      (own cache line) next unclaimed descriptor; CAS by the sender, or by the owner's flush
 * 192  entries[depth]   entry i holds receive index i (mod depth):
 *        +0 done u64 (index + 1 once the result is valid) | +8 status u32 | +12 opcode u32 | +16 byte_len u32
 *        | +20 imm u32 | +24 with_imm u32 | +28 src qpn u32 | +32 sge count u32 | +36 flags u32
 *        | +40 total length u64 | +48 sges[max]: kind u32 | length u32 | file id u64 | offset-or-address u64
 *        | key slot u32 | rkey u32
 * </pre>
 */
final class QueuePairFile {
    static final long MAGIC = 0x4A43434C51505831L;

    static final long STATE = 8;
    static final long ACCESS = 12;
    static final long MIN_RNR = 16;
    static final long QPN = 20;
    static final long PID = 24;
    static final long TOKEN = 32;
    static final long DEPTH = 40;
    static final long MAX_SGE = 44;
    static final long ENTRY_SIZE = 48;
    static final long DOMAIN = 56;
    static final long TAIL = 64;
    static final long HEAD = 128;
    static final long ENTRIES = 192;

    static final long E_DONE = 0;
    static final long E_STATUS = 8;
    static final long E_OPCODE = 12;
    static final long E_BYTE_LEN = 16;
    static final long E_IMM = 20;
    static final long E_WITH_IMM = 24;
    static final long E_SRC_QPN = 28;
    static final long E_SGE_COUNT = 32;
    static final long E_FLAGS = 36;
    static final long E_TOTAL = 40;
    static final long E_SGES = 48;
    static final int SGE_SIZE = 32;
    static final long S_KIND = 0;
    static final long S_LENGTH = 4;
    static final long S_FILE_ID = 8;
    static final long S_OFFSET = 16;
    static final long S_SLOT = 24;
    static final long S_RKEY = 28;

    /** Descriptor flag: a scatter entry failed the owner's lkey check at post time. */
    static final int FLAG_BAD_LKEY = 1;

    static final int S_RESET = 0;
    static final int S_INIT = 1;
    static final int S_RTR = 2;
    static final int S_RTS = 3;
    static final int S_SQD = 4;
    static final int S_ERR = 5;
    static final int S_DESTROYED = 6;

    private QueuePairFile() {
    }

    static int entrySize(int maxSge) {
        return (int) ((E_SGES + (long) SGE_SIZE * maxSge + 63) & -64L);
    }

    static long fileSize(int depth, int maxSge) {
        return ENTRIES + (long) depth * entrySize(maxSge);
    }

    /** Whether a peer in shared state {@code s} processes incoming requests (RTR, RTS, SQD). */
    static boolean isResponding(int s) {
        return s == S_RTR || s == S_RTS || s == S_SQD;
    }
}
