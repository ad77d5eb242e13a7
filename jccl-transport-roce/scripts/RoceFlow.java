import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

/**
 * One roce0 flow for the congestion experiment (roce-cc-netns.sh): a server QP that grants REMOTE_WRITE and a
 * client that streams RDMA WRITEs into it for a while and prints its goodput and counters. The two sides exchange
 * their endpoint records through files in a directory both network namespaces see. Settings come from the
 * environment (JCCL_ROCE_ADDRESS, JCCL_ROCE_PORT, JCCL_ROCE_CC, JCCL_ROCE_LINK_MBPS, ...). FLOW_DEVICE names another
 * device to run the same flow over (tcp0 with JCCL_TCP_ADDRESS and JCCL_TCP_PORT: roce-loss-netns.sh compares them);
 * QP_TIMEOUT the QP's ACK timeout code (default 14).
 *
 * <pre>
 *   java -cp JARS RoceFlow.java server DIR NAME
 *   java -cp JARS RoceFlow.java client DIR NAME SECONDS MESSAGE_BYTES OUTSTANDING
 * </pre>
 */
public final class RoceFlow {
    private static final int REGION_BYTES = 4 << 20;

    public static void main(String[] args) throws Exception {
        boolean server = args[0].equals("server");
        Path dir = Path.of(args[1]);
        String name = args[2];
        String device = System.getenv().getOrDefault("FLOW_DEVICE", "roce0");
        try (Context context = Verbs.device(device).open()) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            CompletionQueue cq = context.createCompletionQueue(256);
            QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            MemoryRegion region = server ? pd.allocateMemory(REGION_BYTES, AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE) : pd.allocateMemory(REGION_BYTES, AccessFlag.LOCAL_WRITE);
            String mine = qp.localEndpoint().encode() + " " + region.address() + " " + region.rkey();
            Path myFile = dir.resolve(name + (server ? ".server" : ".client"));
            Path peerFile = dir.resolve(name + (server ? ".client" : ".server"));
            Files.writeString(dir.resolve(myFile.getFileName() + ".tmp"), mine);
            Files.move(dir.resolve(myFile.getFileName() + ".tmp"), myFile);
            while (!Files.exists(peerFile)) {
                Thread.sleep(10);
            }
            String[] peer = Files.readString(peerFile).trim().split(" ");
            Endpoint remote = Endpoint.decode(peer[0]);
            qp.modify(QueuePairAttributes.toReadyToReceive(remote));
            // QP_TIMEOUT: the ACK timeout code (4.096 us * 2^t; 14 = 67 ms), at least JCCL_ROCE_ACK_TIMEOUT_FLOOR_US
            int timeout = Integer.parseInt(System.getenv().getOrDefault("QP_TIMEOUT", "14"));
            qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).timeout(timeout).retryCount(7));
            Path done = dir.resolve(name + ".done");
            if (server) {
                while (!Files.exists(done)) {
                    Thread.sleep(20);
                }
                print("server " + name, 0, 0, context.counters());
                return;
            }
            long remoteAddress = Long.parseLong(peer[1]);
            int rkey = Integer.parseInt(peer[2]);
            Files.writeString(dir.resolve(name + ".ready"), "ready");
            while (!Files.exists(dir.resolve("go"))) { // both clients start together
                Thread.sleep(1);
            }
            long seconds = Long.parseLong(args[3]);
            int messageBytes = Integer.parseInt(args[4]);
            int outstanding = Integer.parseInt(args[5]);
            WorkCompletion[] wc = WorkCompletion.array(16);
            long start = System.nanoTime();
            long end = start + seconds * 1_000_000_000L;
            long completedBytes = 0;
            int inFlight = 0;
            long posted = 0;
            while (System.nanoTime() < end || inFlight > 0) {
                while (inFlight < outstanding && System.nanoTime() < end) {
                    long offset = (posted * messageBytes) % (REGION_BYTES - messageBytes);
                    qp.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                        .local(region, offset, messageBytes).remote(remoteAddress + offset, rkey));
                    posted++;
                    inFlight++;
                }
                int n = cq.poll(wc, wc.length, 1_000_000L);
                for (int i = 0; i < n; i++) {
                    if (!wc[i].isSuccess()) {
                        throw new IllegalStateException("completion " + wc[i]);
                    }
                    completedBytes += messageBytes;
                    inFlight--;
                }
            }
            double elapsedS = (System.nanoTime() - start) / 1e9;
            print("client " + name, completedBytes, elapsedS, context.counters());
            Files.writeString(done, "done");
        }
    }

    private static void print(String who, long bytes, double seconds, Map<Counter, Long> counters) {
        StringBuilder line = new StringBuilder(who);
        if (seconds > 0) {
            line.append(String.format(" goodput_mbps=%.2f bytes=%d seconds=%.3f", bytes * 8 / seconds / 1e6, bytes,
                seconds));
        }
        for (Counter c : new Counter[] {Counter.SENT_PKTS, Counter.RCVD_PKTS, Counter.COMPLETER_RETRY_ERR,
            Counter.LOCAL_ACK_TIMEOUT_ERR, Counter.RCVD_SEQ_ERR, Counter.OUT_OF_SEQ_REQUEST,
            Counter.DUPLICATE_REQUEST, Counter.NP_ECN_MARKED_ROCE_PACKETS, Counter.NP_CNP_SENT,
            Counter.RP_CNP_HANDLED, Counter.RP_CNP_IGNORED}) {
            line.append(' ').append(c.linuxName()).append('=').append(counters.getOrDefault(c, 0L));
        }
        System.out.println(line);
    }
}
