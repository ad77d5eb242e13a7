package io.jccl.conformance;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.ScatterGatherList;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A peer that calls the verbs API directly, in this JVM, through its own {@link Context} (so its keys, queue
 * pairs and progress are separate from the test's end). {@link PeerProcess} runs one of these in a child JVM.
 */
public final class InProcessPeer implements PeerSide {
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final CompletionCollector collector;
    private final Map<Integer, QueuePair> queuePairs = new ConcurrentHashMap<>();
    private final Map<Integer, MemoryRegion> regions = new ConcurrentHashMap<>();
    private final AtomicInteger nextRegion = new AtomicInteger(1);
    private final String description;
    private ProtectionDomain otherDomain;
    private final Map<Integer, Arena> callerOwned = new ConcurrentHashMap<>();

    /** Opens {@code deviceName} and creates the domain, the completion queue and its poller. */
    public InProcessPeer(String deviceName, String description) {
        this.description = description;
        context = Verbs.device(deviceName).open();
        try {
            domain = context.allocateProtectionDomain();
            queue = context.createCompletionQueue(Math.min(65_536, context.query().maxCompletionQueueEntries()));
            collector = new CompletionCollector(queue, "peer-cq-" + deviceName);
        } catch (RuntimeException e) {
            context.close();
            throw e;
        }
    }

    @Override
    public String description() {
        return description;
    }

    @Override
    public long processId() {
        return ProcessHandle.current().pid();
    }

    @Override
    public Map<io.jccl.verbs.Counter, Long> counters() {
        return context.counters();
    }

    @Override
    public PeerQueuePair createQueuePair(QueuePairSpec spec) {
        QueuePair qp = domain.createQueuePair(new QueuePairInitAttributes(queue, queue, spec.maxSend(),
            spec.maxReceive(), spec.maxSendSge(), spec.maxReceiveSge(), spec.maxInline(), spec.signalAll()));
        queuePairs.put(qp.queuePairNumber(), qp);
        return new PeerQueuePair(qp.queuePairNumber(), qp.localEndpoint());
    }

    @Override
    public void connect(int queuePairNumber, Endpoint remote, ConnectionSpec spec) {
        connect(qp(queuePairNumber), remote, spec);
    }

    /** Drives {@code qp} RESET → INIT → RTR → RTS towards {@code remote} with the settings of {@code spec}. */
    static void connect(QueuePair qp, Endpoint remote, ConnectionSpec spec) {
        qp.modify(QueuePairAttributes.toInit().accessFlags(spec.accessFlags()));
        qp.modify(QueuePairAttributes.toReadyToReceive(remote).minRnrTimer(spec.minRnrTimer()));
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).rnrRetry(spec.rnrRetry())
            .retryCount(spec.retryCount()).timeout(spec.timeout()));
    }

    @Override
    public QueuePairState state(int queuePairNumber) {
        return qp(queuePairNumber).state();
    }

    @Override
    public void modifyToError(int queuePairNumber) {
        qp(queuePairNumber).modify(new QueuePairAttributes().state(QueuePairState.ERROR));
    }

    @Override
    public void destroyQueuePair(int queuePairNumber) {
        QueuePair qp = queuePairs.remove(queuePairNumber);
        if (qp != null) {
            qp.close();
        }
        collector.forget(queuePairNumber);
    }

    @Override
    public PeerRegion allocate(long length, int access) {
        MemoryRegion region = domain.allocateMemory(length, flags(access));
        int id = nextRegion.getAndIncrement();
        regions.put(id, region);
        return new PeerRegion(id, region.address(), region.length(), region.rkey(), region.lkey());
    }

    @Override
    public synchronized PeerRegion allocateInOtherDomain(long length, int access) {
        if (otherDomain == null) {
            otherDomain = context.allocateProtectionDomain();
        }
        MemoryRegion region = otherDomain.allocateMemory(length, flags(access));
        int id = nextRegion.getAndIncrement();
        regions.put(id, region);
        return new PeerRegion(id, region.address(), region.length(), region.rkey(), region.lkey());
    }

    @Override
    public PeerRegion registerCallerOwned(long length, int access) {
        Arena arena = Arena.ofShared();
        MemoryRegion region;
        try {
            region = domain.registerMemory(arena.allocate(length, 4096), flags(access));
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        int id = nextRegion.getAndIncrement();
        regions.put(id, region);
        callerOwned.put(id, arena);
        return new PeerRegion(id, region.address(), region.length(), region.rkey(), region.lkey());
    }

    private static AccessFlag[] flags(int mask) {
        List<AccessFlag> out = new ArrayList<>();
        for (AccessFlag flag : AccessFlag.values()) {
            if (flag.isSetIn(mask)) {
                out.add(flag);
            }
        }
        return out.toArray(AccessFlag[]::new);
    }

    @Override
    public void deregister(int region) {
        MemoryRegion mr = regions.remove(region);
        if (mr == null) {
            throw new IllegalArgumentException("no region " + region);
        }
        try {
            mr.close();
        } finally {
            Arena arena = callerOwned.remove(region);
            if (arena != null) {
                arena.close(); // only after deregistration: the caller owns the memory until then
            }
        }
    }

    @Override
    public void write(int region, long offset, byte[] data) {
        MemorySegment.copy(data, 0, region(region).segment(), ValueLayout.JAVA_BYTE, offset, data.length);
    }

    @Override
    public byte[] read(int region, long offset, int length) {
        byte[] out = new byte[length];
        MemorySegment.copy(region(region).segment(), ValueLayout.JAVA_BYTE, offset, out, 0, length);
        return out;
    }

    @Override
    public void fillPattern(int region, long offset, long length, long seed) {
        Patterns.fill(region(region).segment(), offset, length, seed);
    }

    @Override
    public long firstPatternMismatch(int region, long offset, long length, long seed) {
        return Patterns.firstMismatch(region(region).segment(), offset, length, seed);
    }

    @Override
    public void postReceive(int queuePairNumber, long wrId, List<PeerSge> sges) {
        ReceiveWorkRequest request = new ReceiveWorkRequest(Math.max(1, sges.size())).wrId(wrId);
        fill(request, sges);
        qp(queuePairNumber).postReceive(request);
    }

    @Override
    public void postSend(int queuePairNumber, PeerSend send) {
        SendWorkRequest request = new SendWorkRequest(Math.max(1, send.sges().size())).wrId(send.wrId())
            .opcode(send.opcode()).flags(send.flags()).remote(send.remoteAddress(), send.rkey())
            .immediateData(send.immediateData()).atomic(send.compareAdd(), send.swap());
        fill(request, send.sges());
        qp(queuePairNumber).postSend(request);
    }

    private void fill(ScatterGatherList list, List<PeerSge> sges) {
        for (int i = 0; i < sges.size(); i++) {
            PeerSge sge = sges.get(i);
            list.sge(i).set(region(sge.region()), sge.offset(), sge.length());
        }
        list.setSgeCount(sges.size());
    }

    @Override
    public List<Completion> poll(int queuePairNumber, int count, long timeoutNs) {
        return collector.await(queuePairNumber, count, timeoutNs);
    }

    @Override
    public long[] fetchAndAdd(int queuePairNumber, long remoteAddress, int rkey, long addend, int count) {
        QueuePair qp = qp(queuePairNumber);
        MemoryRegion results = domain.allocateMemory(8L * count, AccessFlag.LOCAL_WRITE);
        try {
            SendWorkRequest request = new SendWorkRequest(1).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD)
                .flags(SendFlag.SIGNALED).remote(remoteAddress, rkey).atomic(addend, 0);
            int window = Math.max(1, Math.min(8, qp.initAttributes().maxSendWorkRequests()));
            int posted = 0;
            int completed = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (completed < count) {
                while (posted < count && posted - completed < window) {
                    qp.postSend(request.wrId(posted).local(results, 8L * posted, 8));
                    posted++;
                }
                List<Completion> done = collector.await(queuePairNumber, 1, TimeUnit.SECONDS.toNanos(10));
                if (done.isEmpty() || System.nanoTime() > deadline) {
                    throw new IllegalStateException("fetch-and-add stalled after " + completed + " of " + count);
                }
                Completion c = done.getFirst();
                if (c.status() != WorkCompletionStatus.SUCCESS || c.wrId() != completed) {
                    throw new IllegalStateException("fetch-and-add " + completed + " completed as " + c);
                }
                completed++;
            }
            long[] originals = new long[count];
            MemorySegment.copy(results.segment(), ValueLayout.JAVA_LONG, 0, originals, 0, count);
            return originals;
        } finally {
            results.close();
        }
    }

    private QueuePair qp(int queuePairNumber) {
        QueuePair qp = queuePairs.get(queuePairNumber);
        if (qp == null) {
            throw new IllegalArgumentException("no queue pair 0x" + Integer.toHexString(queuePairNumber));
        }
        return qp;
    }

    private MemoryRegion region(int id) {
        MemoryRegion mr = regions.get(id);
        if (mr == null) {
            throw new IllegalArgumentException("no region " + id);
        }
        return mr;
    }

    @Override
    public void reset() {
        RuntimeException first = null;
        for (Integer qpn : List.copyOf(queuePairs.keySet())) {
            try {
                destroyQueuePair(qpn);
            } catch (RuntimeException e) {
                first = first == null ? e : first;
            }
        }
        for (Integer id : List.copyOf(regions.keySet())) {
            try {
                deregister(id);
            } catch (RuntimeException e) {
                first = first == null ? e : first;
            }
        }
        collector.checkHealthy();
        if (first != null) {
            throw first;
        }
    }

    @Override
    public void close() {
        try {
            reset();
        } finally {
            collector.close();
            context.close();
        }
    }
}
