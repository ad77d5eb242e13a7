package io.jccl.verbs.testing;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.AtomicCapability;
import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.Reach;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.AbstractContext;
import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;
import io.jccl.verbs.spi.VerbsProvider;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A test-only, in-process verbs provider (device {@code loop0}): queue pairs of one JVM execute requests
 * synchronously at post time (or at the next poll when the responder has no receive posted). It lets the
 * collectives engine and the ConnectionManager be tested without the shm/tcp providers (the jccl-verbs test-jar
 * carries it; a module's test resources register it as a provider where wanted); it supports SEND, RDMA WRITE (with immediate),
 * RDMA READ and {@code mapRemote} (the peer's region itself, since both sides share the process).
 */
public final class LoopProvider implements VerbsProvider {
    static final Map<Integer, LoopQueuePair> QUEUE_PAIRS = new ConcurrentHashMap<>();
    static final ReentrantLock FABRIC = new ReentrantLock();

    /** Queue pairs of {@code domain} still registered (a test's leak check). */
    public static long queuePairCount(io.jccl.verbs.ProtectionDomain domain) {
        long n = 0;
        for (LoopQueuePair qp : QUEUE_PAIRS.values()) {
            if (qp.protectionDomain() == domain) {
                n++;
            }
        }
        return n;
    }

    @Override
    public String name() {
        return "loop";
    }

    @Override
    public List<Device> devices() {
        return List.of(LoopDevice.INSTANCE);
    }

    @Override
    public int order() {
        return 1000;
    }

    static final class LoopDevice implements Device {
        static final LoopDevice INSTANCE = new LoopDevice();
        private final long guid = SecureIds.nonce();

        @Override
        public String name() {
            return "loop0";
        }

        @Override
        public String providerName() {
            return "loop";
        }

        @Override
        public long guid() {
            return guid;
        }

        @Override
        public LinkLayer linkLayer() {
            return LinkLayer.MEMORY;
        }

        @Override
        public Reach reach() {
            return Reach.PROCESS;
        }

        @Override
        public Context open() {
            return new LoopContext(this);
        }
    }

    static final class LoopContext extends AbstractContext {
        private final DeviceAttributes attributes;

        LoopContext(Device device) {
            super(device);
            attributes = new DeviceAttributes("loop0", "loop", "loopback", "1.0", device.guid(), 0, 0, 0,
                1L << 40, 4096, 1 << 16, 1 << 14, 8, 1 << 12, 1 << 20, 1 << 16, 1 << 12, 16, 16, 256,
                AtomicCapability.values()[0], List.of(new PortAttributes(1, PortState.ACTIVE, PathMtu.MTU_4096,
                PathMtu.MTU_4096, LinkLayer.MEMORY.displayName(), 1L << 31, "loop")));
        }

        @Override
        public DeviceAttributes query() {
            return attributes;
        }

        @Override
        protected AbstractProtectionDomain newProtectionDomain() {
            return new LoopDomain(this);
        }

        @Override
        protected void closeProvider() {
        }
    }

    static final class LoopDomain extends AbstractProtectionDomain {
        LoopDomain(AbstractContext context) {
            super(context);
        }

        @Override
        protected SoftMemoryRegion allocate(long length, int access, int regionCount) {
            // Like shm's mapped files: a view a peer already holds stays readable after the owner deregisters
            // (the key is refused for new requests), so memory lives as long as any view of it (automatic arena).
            MemorySegment segment = Arena.ofAuto().allocate(length, 4096);
            return new SoftMemoryRegion(this, segment, SecureIds.key(), SecureIds.key(), access);
        }

        @Override
        protected SoftMemoryRegion wrap(MemorySegment segment, int access) {
            return new SoftMemoryRegion(this, segment, SecureIds.key(), SecureIds.key(), access);
        }

        @Override
        protected AbstractQueuePair newQueuePair(QueuePairInitAttributes attributes) {
            return new LoopQueuePair(this, attributes); // createQueuePair adopts it
        }
    }

    static final class LoopQueuePair extends AbstractQueuePair {
        LoopQueuePair(AbstractProtectionDomain domain, QueuePairInitAttributes init) {
            super(domain, init);
            QUEUE_PAIRS.put(queuePairNumber, this);
        }

        @Override
        protected String localAddress() {
            return "loop";
        }

        @Override
        public boolean supportsDirectAccess() {
            return true;
        }

        @Override
        public MemorySegment mapRemote(long remoteAddress, long length, int rkey, boolean writable) {
            LoopQueuePair peer = QUEUE_PAIRS.get(destQpNumber);
            if (peer == null) {
                throw new VerbsException(VerbsException.Reason.CONNECTION, "peer QP is gone");
            }
            SoftMemoryRegion region = peer.remoteRegion(rkey, remoteAddress, length,
                writable ? AccessFlag.REMOTE_WRITE : AccessFlag.REMOTE_READ);
            if (region == null) {
                throw new VerbsException(VerbsException.Reason.PERMISSION_DENIED, "mapRemote check failed");
            }
            return region.segment().asSlice(remoteAddress - region.address(), length);
        }

        @Override
        protected void onSendPosted() {
            progress();
        }

        @Override
        public int progress() {
            int done = 0;
            FABRIC.lock();
            lock.lock();
            try {
                while (sendNext < sendTail && state == QueuePairState.READY_TO_SEND) {
                    SendSlot slot = sendSlot(sendNext);
                    LoopQueuePair peer = QUEUE_PAIRS.get(destQpNumber);
                    if (peer != null && (peer.state == QueuePairState.INIT || peer.state == QueuePairState.RESET)) {
                        break; // not connected yet: retried at the next poll, as a real transport retries
                    }
                    if (peer == null || (peer.state != QueuePairState.READY_TO_RECEIVE
                        && peer.state != QueuePairState.READY_TO_SEND)) {
                        completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
                        break;
                    }
                    peer.lock.lock();
                    try {
                        if (!execute(slot, peer)) {
                            break; // RNR: retried at the next poll
                        }
                        done++;
                    } finally {
                        peer.lock.unlock();
                    }
                }
            } finally {
                lock.unlock();
                FABRIC.unlock();
            }
            return done;
        }

        private boolean execute(SendSlot slot, LoopQueuePair peer) {
            SendOpcode op = slot.opcode;
            int len = (int) slot.length;
            if (op.consumesReceive() && peer.receiveHead == peer.receiveTail) {
                return false;
            }
            if (!peer.acceptsIncoming(op)) {
                completeSend(WorkCompletionStatus.REM_INV_REQ_ERR, 0, 0);
                peer.enterError();
                return true;
            }
            switch (op) {
                case RDMA_WRITE, RDMA_WRITE_WITH_IMM -> {
                    SoftMemoryRegion region = len == 0 ? null
                        : peer.remoteRegion(slot.rkey, slot.remoteAddress, len, AccessFlag.REMOTE_WRITE);
                    if (len > 0 && region == null) {
                        completeSend(WorkCompletionStatus.REM_ACCESS_ERR, 0, 0);
                        peer.enterError();
                        return true;
                    }
                    if (len > 0 && !gather(slot, 0, region.segment(), slot.remoteAddress - region.address(), len)) {
                        completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                        return true;
                    }
                    if (op == SendOpcode.RDMA_WRITE_WITH_IMM) {
                        peer.completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM,
                            len, slot.immediateData, true, queuePairNumber);
                    }
                }
                case SEND, SEND_WITH_IMM -> {
                    ReceiveSlot r = peer.receiveSlot(peer.receiveHead);
                    if (r.length < len) {
                        completeSend(WorkCompletionStatus.REM_INV_REQ_ERR, 0, 0);
                        peer.completeReceive(WorkCompletionStatus.LOC_LEN_ERR, WorkCompletionOpcode.RECV, 0, 0, false,
                            queuePairNumber);
                        return true;
                    }
                    if (len > 0) {
                        try (Arena tmp = Arena.ofConfined()) {
                            MemorySegment staging = tmp.allocate(len);
                            gather(slot, 0, staging, 0, len);
                            peer.scatterInto(r, staging, len);
                        }
                    }
                    peer.completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV, len,
                        slot.immediateData, op == SendOpcode.SEND_WITH_IMM, queuePairNumber);
                }
                case RDMA_READ -> {
                    SoftMemoryRegion region = peer.remoteRegion(slot.rkey, slot.remoteAddress, len,
                        AccessFlag.REMOTE_READ);
                    if (region == null) {
                        completeSend(WorkCompletionStatus.REM_ACCESS_ERR, 0, 0);
                        peer.enterError();
                        return true;
                    }
                    scatter(slot.sgeAddress, slot.sgeLength, slot.sgeLkey, slot.sgeCount, 0, region.segment(),
                        slot.remoteAddress - region.address(), len);
                }
                default -> {
                    completeSend(WorkCompletionStatus.REM_INV_REQ_ERR, 0, 0);
                    return true;
                }
            }
            completeSend(WorkCompletionStatus.SUCCESS, len, 0);
            return true;
        }

        void scatterInto(ReceiveSlot r, MemorySegment source, int len) {
            scatter(r.sgeAddress, r.sgeLength, r.sgeLkey, r.sgeCount, 0, source, 0, len);
        }

        @Override
        protected void onError() {
            // Tell the peer, as a broken connection would.
            LoopQueuePair peer = QUEUE_PAIRS.get(destQpNumber);
            if (peer != null && peer != this && peer.state != QueuePairState.ERROR
                && peer.state != QueuePairState.RESET) {
                Thread.ofVirtual().start(peer::fail);
            }
        }

        @Override
        protected void destroy() {
            QUEUE_PAIRS.remove(queuePairNumber);
        }
    }
}
