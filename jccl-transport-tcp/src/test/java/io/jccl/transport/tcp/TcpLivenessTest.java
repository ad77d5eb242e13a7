package io.jccl.transport.tcp;

import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.lang.foreign.ValueLayout;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import static io.jccl.transport.tcp.TcpTestSupport.ALL;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Failure detection of the tcp provider (issue 15, item 7): the hung-peer limit is the QP's own timeout and retry
 * count, idle connections are probed with PING/PONG by the engines, and a side that only waits on receives notices
 * a frozen peer within about the limit; stalls shorter than the limit, and applications that do not poll, survive.
 * The peers that stop are child JVMs stopped with SIGSTOP (their engine, the "NIC" of tcp, stops with them); the
 * peers that stay silent are raw sockets that completed the handshake. Bounds are generous (a loaded 2-core host):
 * only orders of magnitude and the limit's lower bound are asserted tightly.
 */
class TcpLivenessTest {
    private static final long MS = 1_000_000L;
    /** The PING frame type of the wire table (docs/transport-tcp.md): written out, as a peer would see it. */
    private static final int PING = 0x21;

    /** The documented limit: max(1 s, 4.096 us x 2^timeout x (retry_cnt+1)); timeout 0 never. */
    private static long limitNs(int timeout, int retryCount) {
        return timeout == 0 ? Long.MAX_VALUE : Math.max(1000 * MS, (4096L << timeout) * (retryCount + 1));
    }

    // ------------------------------------------------------------------------------------------------ child JVMs

    /** A {@link TcpPeerMain} in a child JVM on loopback, with one QP, spoken to over stdin/stdout. */
    private static final class ChildPeer implements AutoCloseable {
        final Process process;
        final BufferedWriter in;
        final LinkedBlockingQueue<String> lines = new LinkedBlockingQueue<>();
        final Endpoint endpoint;
        final long regionAddress;
        final int regionRkey;

        ChildPeer() throws IOException {
            List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m",
                "-Djccl.tcp.address=127.0.0.1", "-cp", System.getProperty("java.class.path"),
                TcpPeerMain.class.getName()));
            process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            in = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
            Thread.ofPlatform().daemon().name("liveness-peer-" + process.pid()).start(() -> {
                try (BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(),
                    StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = out.readLine()) != null) {
                        lines.add(line);
                    }
                } catch (IOException ignored) {
                    // the child is gone
                } finally {
                    lines.add("EOF");
                }
            });
            String[] ready = expect("READY", 30).split(" ");
            endpoint = Endpoint.decode(ready[1]);
            regionAddress = Long.parseLong(ready[2]);
            regionRkey = Integer.parseInt(ready[3]);
        }

        void send(String command) throws IOException {
            in.write(command);
            in.newLine();
            in.flush();
        }

        String expect(String prefix, long seconds) {
            try {
                String line = lines.poll(seconds, TimeUnit.SECONDS);
                if (line == null || !line.startsWith(prefix)) {
                    fail("peer JVM answered " + line + ", expected " + prefix);
                }
                return line;
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        }

        String call(String command) throws IOException {
            send(command);
            return expect("OK", 30);
        }

        void signal(String signal) {
            try {
                Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(process.pid())).start();
                assertTrue(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0, "kill -" + signal);
            } catch (IOException | InterruptedException e) {
                throw new AssertionError(e);
            }
        }

        @Override
        public void close() {
            signal("CONT");
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Our side of a connection to a child JVM: a QP at RTS with the given codes, receives posted. */
    private record Local(Context context, Side side, MemoryRegion memory) implements AutoCloseable {
        static Local connect(ChildPeer child, int timeout, int retryCount, int childTimeout, int childRetry)
            throws IOException {
            Context context = TcpTestSupport.open();
            Side side = Side.create(context, QueuePairInitAttributes.of(context.createCompletionQueue(64))
                .withDepths(16, 16));
            MemoryRegion memory = side.pd().allocateMemory(1 << 20, ALL);
            ReceiveWorkRequest recv = new ReceiveWorkRequest();
            for (int i = 0; i < 4; i++) {
                side.qp().postReceive(recv.wrId(100 + i).local(memory, 4096L * i, 4096));
            }
            side.qp().modify(QueuePairAttributes.toReadyToReceive(child.endpoint));
            child.call("CONNECT " + side.qp().localEndpoint().encode() + " " + childTimeout + " " + childRetry);
            side.qp().modify(QueuePairAttributes.toReadyToSend(side.qp().initialPsn()).timeout(timeout)
                .retryCount(retryCount));
            return new Local(context, side, memory);
        }

        /** Waits for one completion (at most {@code seconds}). */
        WorkCompletion poll(long seconds) {
            WorkCompletion[] wc = WorkCompletion.array(1);
            long deadline = System.nanoTime() + seconds * 1000 * MS;
            while (System.nanoTime() < deadline) {
                if (side.cq().poll(wc, 1, MS) == 1) {
                    return wc[0];
                }
            }
            return fail("no completion within " + seconds + " s");
        }

        long counter(Counter c) {
            return context.counters().get(c);
        }

        @Override
        public void close() {
            context.close();
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * The receive side of an idle connection notices that its peer's process stopped: with nothing outstanding,
     * only receives posted, its receive completes with a flush error within about the limit (and not before it).
     * Before: such a side learnt nothing until its application's own deadline (10 minutes by default).
     */
    @Test
    void shouldFailAnIdleReceiverWithinTheLimitWhenThePeerProcessStops() throws IOException {
        // timeout 18, retry 1: 4.096 us x 2^18 x 2 = 2.15 s.
        long limitNs = limitNs(18, 1);
        assertEquals(2_147_483_648L, limitNs);
        try (ChildPeer child = new ChildPeer(); Local local = Local.connect(child, 18, 1, 18, 1)) {
            child.call("SEND_BYTES 7");
            WorkCompletion first = local.poll(10);
            long receivedNs = System.nanoTime();
            assertTrue(first.isSuccess(), first.status().toString());
            assertEquals(7, local.memory().segment().get(ValueLayout.JAVA_BYTE, 4096L * (first.wrId() - 100)));
            child.signal("STOP");
            long stoppedNs = System.nanoTime();
            long downedBefore = local.counter(Counter.LINK_DOWNED);
            long timeoutsBefore = local.counter(Counter.LOCAL_ACK_TIMEOUT_ERR);

            WorkCompletion flushed = local.poll(30);
            long failedNs = System.nanoTime();
            String timing = "failed " + (failedNs - stoppedNs) / MS + " ms after SIGSTOP, "
                + (failedNs - receivedNs) / MS + " ms after the last message; limit " + limitNs / MS + " ms";
            assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, flushed.status(), timing);
            assertTrue(flushed.opcode().isReceive(), timing);
            assertTrue(failedNs - receivedNs >= limitNs * 9 / 10, "before the limit: " + timing);
            assertTrue(failedNs - stoppedNs <= 3 * limitNs, "too late: " + timing);
            TcpTestSupport.awaitState(local.side().qp(), QueuePairState.ERROR);
            assertEquals(downedBefore + 1, local.counter(Counter.LINK_DOWNED), timing);
            assertEquals(timeoutsBefore + 1, local.counter(Counter.LOCAL_ACK_TIMEOUT_ERR), timing);
            System.out.println("idle receiver, peer stopped: " + timing);
        }
    }

    /**
     * A stop shorter than the limit is survived, by both sides: our limit is 6.4 s, the child's only 1 s (perftest's
     * codes), and the child is stopped for 1.2 s, so on waking it has heard nothing for longer than its own limit.
     * It must not blame us for the time it was stopped. Afterwards a SEND each way and an RDMA WRITE work, and
     * neither QP is in ERR. The link is probed all along: our context receives PINGs while no application sends.
     */
    @Test
    void shouldSurviveAStopShorterThanTheLimitOnBothSides() throws IOException {
        long limitNs = limitNs(19, 2);
        assertTrue(limitNs > 6000 * MS && limitNs < 7000 * MS, "limit " + limitNs);
        try (ChildPeer child = new ChildPeer(); Local local = Local.connect(child, 19, 2, 14, 7)) {
            child.call("SEND_BYTES 1");
            assertTrue(local.poll(10).isSuccess());
            long packetsBefore = local.counter(Counter.PORT_RCV_PACKETS);
            sleep(700); // the child probes the idle link every 250 ms
            long probesWhileIdle = local.counter(Counter.PORT_RCV_PACKETS) - packetsBefore;

            child.signal("STOP");
            sleep(1200);
            child.signal("CONT");
            sleep(700);

            assertEquals("OK RTS", child.call("STATE"), "the stopped child failed its peer");
            assertEquals(QueuePairState.READY_TO_SEND, local.side().qp().state());
            // A SEND each way and an RDMA WRITE with correct data.
            child.call("SEND_BYTES 2");
            WorkCompletion in = local.poll(10);
            assertTrue(in.isSuccess(), in.status().toString());
            assertEquals(2, local.memory().segment().get(ValueLayout.JAVA_BYTE, 4096L * (in.wrId() - 100)));
            local.memory().segment().asSlice(65536, 64).fill((byte) 3);
            local.side().qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND)
                .flags(SendFlag.SIGNALED).local(local.memory(), 65536, 64));
            assertTrue(local.poll(10).isSuccess());
            assertEquals("OK 64 3", child.call("RECEIVE_ONE"));
            local.memory().segment().asSlice(131072, 4096).fill((byte) 9);
            local.side().qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE)
                .flags(SendFlag.SIGNALED).remote(child.regionAddress + 4096, child.regionRkey)
                .local(local.memory(), 131072, 4096));
            assertTrue(local.poll(10).isSuccess());
            child.call("CHECK 4096 4096 9");
            assertEquals("OK RTS", child.call("STATE"));
            assertEquals(QueuePairState.READY_TO_SEND, local.side().qp().state());
            assertTrue(probesWhileIdle >= 1, "no PING reached us in 700 ms of an idle link (child limit 1 s)");
        }
    }

    /**
     * A peer whose application computes and never polls or posts for three times the limit still answers PINGs:
     * its progress thread serves a QP nobody polls. Our side only has receives posted.
     */
    @Test
    void shouldKeepAPeerWhoseApplicationDoesNotPollForLongerThanTheLimit() throws IOException {
        long limitNs = limitNs(18, 0); // 1.07 s
        try (ChildPeer child = new ChildPeer(); Local local = Local.connect(child, 18, 0, 18, 0)) {
            child.call("SEND_BYTES 4");
            assertTrue(local.poll(10).isSuccess());
            long sentBefore = local.counter(Counter.PORT_XMIT_PACKETS);
            long receivedBefore = local.counter(Counter.PORT_RCV_PACKETS);
            long busyMs = 3 * limitNs / MS;
            child.send("BUSY " + busyMs);
            sleep(busyMs);
            child.expect("OK busy", 30);
            long sent = local.counter(Counter.PORT_XMIT_PACKETS) - sentBefore;
            long received = local.counter(Counter.PORT_RCV_PACKETS) - receivedBefore;
            assertEquals(QueuePairState.READY_TO_SEND, local.side().qp().state(),
                "failed a peer that was only busy (" + sent + " frames out, " + received + " in)");
            // Probes went both ways while the child's application computed: at least one per quarter limit each.
            assertTrue(sent >= 4 && received >= 4, sent + " frames sent, " + received + " received in " + busyMs
                + " ms of application silence");
            child.call("SEND_BYTES 5");
            WorkCompletion in = local.poll(10);
            assertTrue(in.isSuccess(), in.status().toString());
            assertEquals(5, local.memory().segment().get(ValueLayout.JAVA_BYTE, 4096L * (in.wrId() - 100)));
            assertEquals("OK RTS", child.call("STATE"));
        }
    }

    // ------------------------------------------------------------------------------------------------ raw peers

    /** A QP at RTR whose peer is a raw socket that completes the handshake and then only reads. */
    private static final class SilentPeer implements AutoCloseable {
        /** The raw peer's first PSN. */
        static final int PSN = 0x42;
        final QueuePair qp;
        final Socket socket;
        final long connectedNs;
        /** Types and PSNs of the frames the QP sent us, and when the stream ended. */
        final List<long[]> frames = new CopyOnWriteArrayList<>();
        volatile long endedNs;

        SilentPeer(Side side) throws IOException {
            QueuePair created;
            do {
                created = side.pd().createQueuePair(QueuePairInitAttributes.of(side.cq()));
            } while (created.queuePairNumber() == 0xFFFFFF);
            qp = created;
            int fakeQpn = qp.queuePairNumber() + 1; // the larger QPN connects: the raw peer
            long high = 0x0123456789ABCDEFL;
            long low = qp.queuePairNumber();
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            qp.modify(QueuePairAttributes.toReadyToReceive(new Endpoint("tcp", "tcp0", fakeQpn, PSN,
                "127.0.0.1:9/" + HexFormat.of().toHexDigits(high) + HexFormat.of().toHexDigits(low))));
            EndpointAddress address = EndpointAddress.parse(qp.localEndpoint().address());
            socket = new TcpTestSupport.RawConnector(fakeQpn, high, low, qp.queuePairNumber(), address.secretHigh(),
                address.secretLow()).connect(address.socketAddress());
            connectedNs = System.nanoTime();
            socket.setSoTimeout(0);
            Thread.ofPlatform().daemon().name("silent-peer-" + fakeQpn).start(() -> {
                byte[] header = new byte[Wire.HEADER];
                try {
                    DataInputStream stream = new DataInputStream(socket.getInputStream());
                    while (true) {
                        stream.readFully(header);
                        ByteBuffer b = ByteBuffer.wrap(header);
                        frames.add(new long[] {b.get(Wire.OFF_TYPE) & 0xFF, b.getInt(Wire.OFF_PSN), System.nanoTime()});
                    }
                } catch (IOException end) {
                    endedNs = System.nanoTime();
                }
            });
        }

        @Override
        public void close() throws IOException {
            socket.close();
            qp.close();
        }
    }

    /**
     * A side reading a long frame of its peer's sends PINGs while it has nothing else to send, even with an infinite
     * limit of its own: the peer's own PINGs wait behind that frame, and without ours the writer of a long frame on a
     * slow link would hear nothing for as long as it writes. Here the peer trickles a 24 KiB WRITE over about 1.2 s.
     */
    @Test
    void shouldProbeThePeerWhileReadingItsLongFrame() throws IOException, InterruptedException {
        try (Context context = TcpTestSupport.open()) {
            Side side = Side.create(context);
            MemoryRegion target = side.pd().allocateMemory(1 << 16, ALL);
            try (SilentPeer p = new SilentPeer(side)) {
                p.qp.modify(QueuePairAttributes.toReadyToSend(p.qp.initialPsn()).timeout(0));
                int length = 24 * 1024;
                ByteBuffer header = ByteBuffer.allocate(Wire.HEADER);
                header.put(Wire.OFF_TYPE, (byte) 0x03).putInt(Wire.OFF_PSN, SilentPeer.PSN)
                    .putInt(Wire.OFF_LENGTH, length).putInt(Wire.OFF_RKEY, target.rkey())
                    .putLong(Wire.OFF_VA, target.address()); // WRITE
                var out = p.socket.getOutputStream();
                out.write(header.array());
                byte[] piece = new byte[1024];
                Arrays.fill(piece, (byte) 0x6B);
                long start = System.nanoTime();
                for (int i = 0; i < length / piece.length; i++) {
                    Thread.sleep(50);
                    out.write(piece);
                }
                long trickleNs = System.nanoTime() - start;
                TcpTestSupport.awaitTrue("the ACK of the WRITE", () -> p.frames.stream().anyMatch(f -> f[0] == 0x11));
                assertEquals(0x6B, target.segment().get(ValueLayout.JAVA_BYTE, length - 1));
                long pings = p.frames.stream().filter(f -> f[0] == PING).count();
                String what = pings + " PINGs while the payload trickled in for " + trickleNs / MS + " ms";
                System.out.println("long frame: " + what);
                assertTrue(pings >= 2 && pings <= trickleNs / (200 * MS) + 1, what);
                assertEquals(QueuePairState.READY_TO_SEND, p.qp.state(), what);
            }
        }
    }

    /**
     * The limit follows the QP's attributes, in both directions of a factor four: a peer that completed the
     * handshake and never answers is failed after about 1.07 s with timeout 18 and 4.3 s with timeout 20, each
     * after PINGs with sequence numbers 1, 2, ...; with timeout 0 (infinite) it is never failed and never probed.
     * Before: max(10 s, ...) and only with requests outstanding, so none of the three was ever failed.
     */
    @Test
    void shouldTakeTheLimitFromTheQueuePairsTimeoutAndRetryCount() throws IOException {
        try (Context context = TcpTestSupport.open()) {
            Side side = Side.create(context);
            int[] timeouts = {18, 20, 0};
            List<SilentPeer> peers = new ArrayList<>();
            try {
                for (int timeout : timeouts) {
                    SilentPeer p = new SilentPeer(side);
                    peers.add(p);
                    p.qp.modify(QueuePairAttributes.toReadyToSend(p.qp.initialPsn()).timeout(timeout).retryCount(0));
                    p.qp.postReceive(new ReceiveWorkRequest().wrId(timeout)
                        .local(side.pd().allocateMemory(64, ALL), 0, 64));
                }
                long[] failedAfterNs = new long[timeouts.length];
                long deadline = System.nanoTime() + 20_000 * MS;
                WorkCompletion[] wc = WorkCompletion.array(4);
                int failed = 0;
                while (failed < 2 && System.nanoTime() < deadline) {
                    int n = side.cq().poll(wc, 4, MS);
                    long now = System.nanoTime();
                    for (int i = 0; i < n; i++) {
                        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, wc[i].status());
                        int k = wc[i].wrId() == 18 ? 0 : wc[i].wrId() == 20 ? 1 : 2;
                        failedAfterNs[k] = now - peers.get(k).connectedNs;
                        failed++;
                    }
                }
                sleep(500); // the infinite one gets half a second more than the longest
                String timing = "failed after " + failedAfterNs[0] / MS + " ms (timeout 18) and " + failedAfterNs[1] / MS
                    + " ms (timeout 20); PINGs seen " + peers.get(0).frames.size() + " / " + peers.get(1).frames.size()
                    + " / " + peers.get(2).frames.size();
                System.out.println("limit from the attributes: " + timing);
                assertEquals(0, failedAfterNs[2], "timeout 0 failed: " + timing);
                assertEquals(QueuePairState.READY_TO_SEND, peers.get(2).qp.state(), "timeout 0: " + timing);
                assertTrue(peers.get(2).frames.isEmpty(), "timeout 0 probed: " + timing);
                for (int k = 0; k < 2; k++) {
                    long limit = limitNs(timeouts[k], 0);
                    assertTrue(failedAfterNs[k] > 0, "timeout " + timeouts[k] + " never failed: " + timing);
                    assertTrue(failedAfterNs[k] >= limit * 19 / 20, "before the limit: " + timing);
                    assertTrue(failedAfterNs[k] <= limit + 2500 * MS, "too late: " + timing);
                    List<long[]> frames = peers.get(k).frames;
                    assertTrue(frames.size() >= 3, "probes: " + timing);
                    for (int f = 0; f < frames.size(); f++) {
                        assertEquals(PING, frames.get(f)[0], timing);
                        assertEquals(f + 1, frames.get(f)[1], timing);
                    }
                    // The first probe after about a quarter of the limit.
                    long firstNs = frames.getFirst()[2] - peers.get(k).connectedNs;
                    assertTrue(firstNs >= limit / 4 - 50 * MS && firstNs <= limit / 2 + 500 * MS,
                        "first PING after " + firstNs / MS + " ms; " + timing);
                }
                assertTrue(failedAfterNs[1] - failedAfterNs[0] >= 2000 * MS, timing);
            } finally {
                for (SilentPeer p : peers) {
                    p.close();
                }
            }
        }
    }
}
