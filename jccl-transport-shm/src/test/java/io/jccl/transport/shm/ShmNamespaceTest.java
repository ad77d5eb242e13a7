package io.jccl.transport.shm;

import io.jccl.transport.shm.ShmTwoProcessTest.ChildPeer;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static io.jccl.transport.shm.ShmTestSupport.ALL_REMOTE;
import static io.jccl.transport.shm.ShmTestSupport.assertSuccess;
import static io.jccl.transport.shm.ShmTwoProcessTest.expectLine;
import static io.jccl.transport.shm.ShmTwoProcessTest.filesOfOwner;
import static io.jccl.transport.shm.ShmTwoProcessTest.ownerPrefix;
import static io.jccl.transport.shm.ShmTwoProcessTest.spawn;
import static io.jccl.transport.shm.ShmTwoProcessTest.waitUntilGone;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A process in another PID namespace that shares {@code /dev/shm} (containers of one pod, {@code docker --ipc}):
 * its pids mean nothing here, so neither the reaper nor a peer's liveness check may judge it by pid. Real
 * namespaces through {@code unshare} (root); skipped where that is not possible.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ShmNamespaceTest {

    @BeforeEach
    void needsPidNamespaces() {
        assumeTrue(PidNamespaces.available(), "unshare --pid --fork --mount-proc is not usable here (needs root)");
    }

    private static Process spawnInOwnNamespace(String mode) throws Exception {
        return spawn(PidNamespaces.prefix(), ShmPeerMain.class.getName(), mode);
    }

    @Test
    void shouldLeaveTheFilesOfALiveProcessInAnotherPidNamespaceAndReapThemOnceItIsKilled() throws Exception {
        Process unshare = spawnInOwnNamespace("hold");
        try {
            ProcessHandle jvm = PidNamespaces.jvmOf(unshare);
            BufferedReader out = new BufferedReader(new InputStreamReader(unshare.getInputStream(),
                StandardCharsets.UTF_8));
            String[] files = expectLine(out, "FILES").split(" ");
            assertEquals(4, files.length, "context, region and QP files expected");
            String prefix = ownerPrefix(Path.of(files[1]).getFileName().toString());
            assertTrue(!prefix.startsWith("jccl-" + jvm.pid() + "-"),
                "the child names its files with its own pid, not with " + jvm.pid() + ": " + prefix);
            List<Path> owned = filesOfOwner(prefix);

            // Every way this process reaps: explicitly, at open and at close.
            ShmFiles.reap();
            new ShmTestSupport.Side().close();
            ShmFiles.reap();
            for (Path file : owned) {
                assertTrue(Files.exists(file), "a live process's file, reaped from another PID namespace: " + file);
            }

            jvm.destroyForcibly();
            assertTrue(unshare.waitFor(10, TimeUnit.SECONDS));
            ShmFiles.reap();
            for (Path file : owned) {
                assertTrue(!Files.exists(file), "the killed process's file stays: " + file);
            }
        } finally {
            unshare.destroyForcibly();
        }
    }

    @Test
    void shouldKeepAPeerInAnotherPidNamespaceAliveUntilItIsKilledAndThenRemoveItsFiles() throws Exception {
        Process unshare = spawnInOwnNamespace("peer");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            ProcessHandle jvm = PidNamespaces.jvmOf(unshare);
            ChildPeer peer = ChildPeer.connect(unshare, side, AccessFlag.REMOTE_WRITE);
            BufferedReader out = peer.out();
            PrintStream toChild = peer.toChild();
            String[] ep = peer.endpoint();
            Endpoint remote = Endpoint.decode(ep[1]);
            long remoteAddress = Long.parseLong(ep[2]);
            int rkey = Integer.parseInt(ep[3]);
            ShmAddress address = ShmAddress.parse(remote.address());
            assertNotEquals(jvm.pid(), address.pid(), "the peer's pid is one of its own namespace");
            String prefix = ownerPrefix(address.contextFile());

            MemoryRegion local = side.pd.allocateMemory(1 << 16, ALL_REMOTE);
            SendWorkRequest send = new SendWorkRequest();
            local.segment().setString(0, "across namespaces");
            side.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(local, 0, 18).remote(remoteAddress + 100, rkey));
            assertSuccess(side.next());
            // A blocking poll that finds nothing runs the 100 ms liveness check a few times: the live peer stays.
            assertEquals(0, side.cq.poll(side.wc, 1, 450_000_000L));
            side.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, 1000, 18)
                .remote(remoteAddress + 100, rkey));
            assertSuccess(side.next());
            assertEquals("across namespaces", local.segment().getString(1000));
            ShmFiles.reap();
            assertEquals(QueuePairState.READY_TO_SEND, side.qp.state());
            List<Path> owned = filesOfOwner(prefix);
            assertTrue(owned.size() >= 3, "ctx, qp and region files (the private region has none): " + owned);

            // The child's one receive takes this SEND; the next waits on RNR until the child dies.
            side.qp.postSend(send.wrId(3).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(local, 0, 8));
            assertSuccess(side.next());
            side.qp.postReceive(new ReceiveWorkRequest().wrId(50).local(local, 4000, 64));
            side.qp.postSend(send.wrId(4).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(local, 0, 8));
            assertEquals(0, side.pollNow());
            long killedNs = System.nanoTime();
            jvm.destroyForcibly();
            WorkCompletion wc = side.next();
            long failedNs = System.nanoTime();
            assertEquals(4, wc.wrId());
            assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, wc.status());
            assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, side.next().status());
            // No reap, open or close here: the survivor that found the peer dead removed its files.
            long goneNs = waitUntilGone(owned, 3_000);
            System.out.printf("peer in another PID namespace SIGKILLed: request failed after %.1f ms, its %d files "
                + "removed after %.1f ms%n", (failedNs - killedNs) / 1e6, owned.size(), (goneNs - killedNs) / 1e6);
        } finally {
            unshare.destroyForcibly();
        }
    }

    @Test
    void shouldRefuseThePrivateMemoryOfAPeerInAnotherPidNamespace() throws Exception {
        Process unshare = spawnInOwnNamespace("peer");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            ChildPeer peer = ChildPeer.connect(unshare, side);
            BufferedReader out = peer.out();
            PrintStream toChild = peer.toChild();
            String[] ep = peer.endpoint();
            long privateAddress = Long.parseLong(ep[4]);
            int privateRkey = Integer.parseInt(ep[5]);
            MemoryRegion local = side.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            local.segment().set(ValueLayout.JAVA_LONG, 0, -1);
            // Cross-memory attach addresses the owner by pid; this pid would name another process here.
            side.qp.postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
                .local(local, 0, 8).remote(privateAddress, privateRkey));
            assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, side.next().status());
            assertEquals(-1, local.segment().get(ValueLayout.JAVA_LONG, 0), "nothing was read");
            toChild.println("EXIT");
            assertTrue(unshare.waitFor(10, TimeUnit.SECONDS));
        } finally {
            unshare.destroyForcibly();
        }
    }
}
