package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;

import static io.jccl.transport.shm.ShmTestSupport.ALL_REMOTE;
import static io.jccl.transport.shm.ShmTestSupport.assertSuccess;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Two real processes: the data path across JVMs, a peer killed with SIGKILL, and reaping of its files. */
class ShmTwoProcessTest {

    static Process spawn(String mode) throws IOException {
        return spawn(List.of(), ShmPeerMain.class.getName(), mode);
    }

    /** A child JVM running {@code mainClass} with {@code args}, its command line after {@code prefix}. */
    static Process spawn(List<String> prefix, String mainClass, String... args) throws IOException {
        List<String> command = new ArrayList<>(prefix);
        command.addAll(List.of(System.getProperty("java.home") + "/bin/java",
            "--enable-native-access=ALL-UNNAMED", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
            "-cp", System.getProperty("java.class.path")));
        String dir = System.getProperty("jccl.shm.dir");
        if (dir != null) {
            command.add("-Djccl.shm.dir=" + dir);
        }
        command.add(mainClass);
        command.addAll(List.of(args));
        ProcessBuilder builder = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT);
        if (!prefix.isEmpty()) {
            // The counter files are named by pid, the same (1) for every child in a namespace of its own, and a
            // killed one's would stay: there pid 1 is init, always alive (jccl-verbs' CounterFile reaper).
            builder.environment().put("JCCL_COUNTERS", "0");
        }
        return builder.start();
    }

    /** {@code jccl-<pid>-<owner>-} of a provider file name: what every file of that process starts with. */
    static String ownerPrefix(String fileName) {
        int first = fileName.indexOf('-');
        int second = fileName.indexOf('-', first + 1);
        int third = fileName.indexOf('-', second + 1);
        return fileName.substring(0, third + 1);
    }

    /** The files in the directory whose names start with {@code prefix}. */
    static List<Path> filesOfOwner(String prefix) throws IOException {
        try (Stream<Path> files = Files.list(ShmFiles.DIRECTORY)) {
            return files.filter(p -> p.getFileName().toString().startsWith(prefix)).toList();
        }
    }

    /** Waits until none of {@code files} exists; returns System.nanoTime() then, fails after {@code timeoutMs}. */
    static long waitUntilGone(List<Path> files, long timeoutMs) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (true) {
            long now = System.nanoTime();
            if (files.stream().noneMatch(Files::exists)) {
                return now;
            }
            if (now - deadline > 0) {
                throw new AssertionError("still there after " + timeoutMs + " ms: "
                    + files.stream().filter(Files::exists).toList());
            }
            Thread.sleep(1);
        }
    }

    /**
     * A child peer ("peer" mode) connected to {@code side}: reads its {@code EP} line (endpoint, region address,
     * rkey, ...), sends our endpoint, brings our QP to RTS (INIT with {@code access}) and waits for its READY.
     */
    record ChildPeer(BufferedReader out, PrintStream toChild, String[] endpoint) {
        static ChildPeer connect(Process child, ShmTestSupport.Side side, AccessFlag... access) throws IOException {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
            PrintStream toChild = new PrintStream(child.getOutputStream(), true, StandardCharsets.UTF_8);
            String[] ep = expectLine(out, "EP ").split(" ");
            toChild.println(side.qp.localEndpoint().encode());
            side.qp.modify(QueuePairAttributes.toInit(access));
            side.qp.modify(QueuePairAttributes.toReadyToReceive(Endpoint.decode(ep[1])));
            side.qp.modify(QueuePairAttributes.toReadyToSend(side.qp.initialPsn()));
            expectLine(out, "READY");
            return new ChildPeer(out, toChild, ep);
        }
    }

    static String expectLine(BufferedReader reader, String prefix) throws IOException {
        String line;
        while ((line = reader.readLine()) != null) {
            if (line.startsWith(prefix)) {
                return line;
            }
        }
        throw new AssertionError("peer exited before printing " + prefix);
    }

    @Test
    void shouldWriteReadSendAndRunAtomicsAcrossProcessesThenFailCleanlyWhenThePeerIsKilled() throws Exception {
        Process child = spawn("peer");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            ChildPeer peer = ChildPeer.connect(child, side, AccessFlag.REMOTE_WRITE);
            BufferedReader out = peer.out();
            PrintStream toChild = peer.toChild();
            String[] ep = peer.endpoint();
            long remoteAddress = Long.parseLong(ep[2]);
            int rkey = Integer.parseInt(ep[3]);

            MemoryRegion local = side.pd.allocateMemory(1 << 16, ALL_REMOTE);
            SendWorkRequest send = new SendWorkRequest();
            local.segment().setString(0, "across processes");
            side.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(local, 0, 17).remote(remoteAddress + 100, rkey));
            assertSuccess(side.next());
            side.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, 1000, 17)
                .remote(remoteAddress + 100, rkey));
            assertSuccess(side.next());
            assertEquals("across processes", local.segment().getString(1000));
            // The child's registered (private) memory, by cross-memory attach: same PID namespace, so allowed.
            side.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, 1000, 8)
                .remote(Long.parseLong(ep[4]), Integer.parseInt(ep[5])));
            assertSuccess(side.next());
            assertEquals(4242, local.segment().get(ValueLayout.JAVA_LONG, 1000));
            for (int i = 0; i < 3; i++) {
                side.qp.postSend(send.wrId(3).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).local(local, 2000, 8)
                    .remote(remoteAddress + 4096, rkey).atomic(5, 0));
                assertSuccess(side.next());
                assertEquals(5L * i, local.segment().get(ValueLayout.JAVA_LONG, 2000));
            }
            local.segment().setString(3000, "message");
            side.qp.postSend(send.wrId(4).opcode(SendOpcode.SEND_WITH_IMM).flags(SendFlag.SIGNALED)
                .local(local, 3000, 8).immediateData(99));
            assertSuccess(side.next());
            toChild.println("WAITRECV");
            assertEquals("RECV 8 99 message SUCCESS", expectLine(out, "RECV "));

            // The child has no receive left: this SEND waits on RNR (infinite retry) until the child dies.
            side.qp.postReceive(new ReceiveWorkRequest().wrId(50).local(local, 4000, 64));
            side.qp.postSend(send.wrId(5).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(local, 0, 8));
            assertEquals(0, side.pollNow());
            child.destroyForcibly();
            assertTrue(child.waitFor(10, TimeUnit.SECONDS));
            WorkCompletion wc = side.next();
            assertEquals(5, wc.wrId());
            assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, wc.status());
            wc = side.next();
            assertEquals(50, wc.wrId());
            assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, wc.status());
            assertEquals(QueuePairState.ERROR, side.qp.state());
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void shouldSeeTheRevocationOfAnotherProcess() throws Exception {
        Process child = spawn("peer");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            ChildPeer peer = ChildPeer.connect(child, side);
            BufferedReader out = peer.out();
            PrintStream toChild = peer.toChild();
            String[] ep = peer.endpoint();
            long remoteAddress = Long.parseLong(ep[2]);
            int rkey = Integer.parseInt(ep[3]);
            MemoryRegion local = side.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            SendWorkRequest send = new SendWorkRequest();
            MemorySegment view = side.qp.mapRemote(remoteAddress, 64, rkey, true);
            view.set(ValueLayout.JAVA_LONG, 0, 42);
            side.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(local, 0, 8).remote(remoteAddress, rkey));
            assertSuccess(side.next());

            toChild.println("DEREG");
            expectLine(out, "DEREGISTERED");
            VerbsException denied = assertThrows(VerbsException.class,
                () -> side.qp.mapRemote(remoteAddress, 64, rkey, true));
            assertEquals(VerbsException.Reason.PERMISSION_DENIED, denied.reason());
            side.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(local, 0, 8).remote(remoteAddress, rkey));
            assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, side.next().status());
            toChild.println("EXIT");
            assertTrue(child.waitFor(10, TimeUnit.SECONDS));
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void shouldRemoveFilesAtExitWhenNothingWasClosed() throws Exception {
        Process child = spawn("exit");
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
            String[] files = expectLine(out, "FILES").split(" ");
            assertEquals(4, files.length, "context, region and QP files expected");
            assertTrue(child.waitFor(30, TimeUnit.SECONDS));
            assertEquals(0, child.exitValue());
            for (int i = 1; i < files.length; i++) {
                assertFalse(Files.exists(Path.of(files[i])), "removed by the shutdown hook: " + files[i]);
            }
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void shouldReapFilesOfAProcessKilledWithSigkill() throws Exception {
        Process child = spawn("hold");
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
            String[] files = expectLine(out, "FILES").split(" ");
            assertEquals(4, files.length, "context, region and QP files expected");
            child.destroyForcibly();
            assertTrue(child.waitFor(10, TimeUnit.SECONDS));
            for (int i = 1; i < files.length; i++) {
                assertTrue(Files.exists(Path.of(files[i])), "SIGKILL runs no shutdown hook: " + files[i]);
                assertTrue(files[i].contains("jccl-" + child.pid() + "-"));
            }
            // Opening the device reaps files of dead owners.
            new ShmTestSupport.Side().close();
            for (int i = 1; i < files.length; i++) {
                assertFalse(Files.exists(Path.of(files[i])), "reaped: " + files[i]);
            }
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void shouldRemoveTheFilesOfAKilledPeerAsSoonAsASurvivorFindsItDead() throws Exception {
        Process child = spawn("peer");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            ChildPeer peer = ChildPeer.connect(child, side);
            BufferedReader out = peer.out();
            PrintStream toChild = peer.toChild();
            String[] ep = peer.endpoint();
            Endpoint remote = Endpoint.decode(ep[1]);
            List<Path> owned = filesOfOwner(ownerPrefix(ShmAddress.parse(remote.address()).contextFile()));
            assertTrue(owned.size() >= 3, "ctx, qp and region files: " + owned);

            // An idle survivor: its thread sits in a blocking poll, which runs the liveness check every 100 ms.
            AtomicBoolean stop = new AtomicBoolean();
            Thread poller = new Thread(() -> {
                WorkCompletion[] wc = WorkCompletion.array(4);
                while (!stop.get()) {
                    side.cq.poll(wc, 4, 1_000_000_000L);
                }
            });
            poller.start();
            long killedNs = System.nanoTime();
            long goneNs;
            try {
                child.destroyForcibly();
                assertTrue(child.waitFor(10, TimeUnit.SECONDS));
                goneNs = waitUntilGone(owned, 3_000);
            } finally {
                stop.set(true);
                poller.join();
            }
            assertEquals(QueuePairState.ERROR, side.qp.state());
            System.out.printf("peer SIGKILLed: its %d files removed by the survivor after %.1f ms%n", owned.size(),
                (goneNs - killedNs) / 1e6);
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void shouldReapTheFilesOfAProcessKilledWhileAContextWasOpenWhenItCloses() throws Exception {
        ShmTestSupport.Side side = new ShmTestSupport.Side();
        Process child = spawn("hold");
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
            String[] files = expectLine(out, "FILES").split(" ");
            List<Path> owned = filesOfOwner(ownerPrefix(Path.of(files[1]).getFileName().toString()));
            child.destroyForcibly();
            assertTrue(child.waitFor(10, TimeUnit.SECONDS));
            for (Path file : owned) {
                assertTrue(Files.exists(file), "SIGKILL runs no shutdown hook: " + file);
            }
            side.close();
            for (Path file : owned) {
                assertFalse(Files.exists(file), "reaped at close: " + file);
            }
        } finally {
            side.close();
            child.destroyForcibly();
        }
    }
}
