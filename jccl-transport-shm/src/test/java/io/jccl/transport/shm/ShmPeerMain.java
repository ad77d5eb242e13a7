package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/**
 * The other process of the multi-process tests. Talks line by line on stdin/stdout.
 *
 * <p>Mode {@code hold}: opens a context, a region and a QP, prints {@code FILES <paths>} and sleeps (the test
 * kills it with SIGKILL). Mode {@code exit}: the same, but exits at once without closing anything. Mode
 * {@code peer}: prints {@code EP <endpoint> <region address> <rkey> <private address> <private rkey>} (the second
 * region is registered caller memory, reached by cross-memory attach; its first 8 bytes hold 4242), reads the
 * test's endpoint, connects, posts one receive, prints {@code READY}, then serves commands until {@code EXIT} (or
 * being killed): {@code WAITRECV} waits for the receive and prints {@code RECV <len> <imm> <text> <status>};
 * {@code DEREG} deregisters the region and prints {@code DEREGISTERED}.
 */
public final class ShmPeerMain {
    private ShmPeerMain() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Context context = Verbs.device("shm0").open();
        ProtectionDomain pd = context.allocateProtectionDomain();
        CompletionQueue cq = context.createCompletionQueue(64);
        QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq));
        MemoryRegion region = pd.allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);
        if (args[0].equals("exit")) {
            StringBuilder files = new StringBuilder("FILES");
            for (Path path : ShmFiles.owned()) {
                files.append(' ').append(path);
            }
            System.out.println(files);
            System.out.flush();
            System.exit(0); // nothing closed: the shutdown hook must remove the files
        }
        if (args[0].equals("hold")) {
            StringBuilder files = new StringBuilder("FILES");
            for (Path path : ShmFiles.owned()) {
                files.append(' ').append(path);
            }
            System.out.println(files);
            System.out.flush();
            Thread.sleep(60_000);
            return;
        }
        MemorySegment privateMemory = Arena.global().allocate(4096, 64);
        privateMemory.set(ValueLayout.JAVA_LONG, 0, 4242);
        MemoryRegion privateRegion = pd.registerMemory(privateMemory, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_WRITE);
        System.out.println("EP " + qp.localEndpoint().encode() + " " + region.address() + " " + region.rkey() + " "
            + privateRegion.address() + " " + privateRegion.rkey());
        System.out.flush();
        Endpoint remote = Endpoint.decode(in.readLine().trim());
        qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_ATOMIC));
        qp.modify(QueuePairAttributes.toReadyToReceive(remote));
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()));
        qp.postReceive(new ReceiveWorkRequest().wrId(1).local(region, 32768, 1024));
        System.out.println("READY");
        System.out.flush();
        WorkCompletion[] wc = WorkCompletion.array(1);
        String line;
        while ((line = in.readLine()) != null && !line.equals("EXIT")) {
            switch (line) {
                case "WAITRECV" -> {
                    while (cq.poll(wc, 1, 1_000_000_000L) == 0) {
                        Thread.onSpinWait();
                    }
                    System.out.println("RECV " + wc[0].byteLength() + " " + wc[0].immediateData() + " "
                        + region.segment().getString(32768) + " " + wc[0].status());
                }
                case "DEREG" -> {
                    region.close();
                    System.out.println("DEREGISTERED");
                }
                default -> System.out.println("UNKNOWN " + line);
            }
            System.out.flush();
        }
        context.close();
    }
}
