package io.jccl.conformance;

import io.jccl.verbs.Endpoint;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.stream.Collectors;

/**
 * The child-JVM end of {@link RemotePeer}: opens the device named by its argument with an {@link InProcessPeer}
 * and executes one command per line read from stdin, answering on stdout.
 *
 * <p>Protocol (text, one line each way, fields separated by single spaces; lists are comma-separated, an empty
 * list or byte string is {@code -}, bytes are Base64):
 * <pre>
 *   request:  &lt;id&gt; &lt;command&gt; &lt;arguments...&gt;
 *   answer:   @@ &lt;id&gt; OK &lt;results...&gt;
 *         or  @@ &lt;id&gt; ERR &lt;VerbsException reason or exception class&gt; &lt;Base64 message&gt;
 * </pre>
 * When the device is open the process prints {@code @@ 0 OK ready}. Anything the provider prints goes to stderr
 * (stdout is reserved for answers). The process exits on the {@code exit} command and when stdin closes, so it
 * never outlives the test JVM.
 */
public final class PeerProcess {
    private PeerProcess() {
    }

    /** Runs the peer: {@code PeerProcess <device>}. */
    public static void main(String[] args) throws IOException {
        PrintStream answers = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (args.length != 1) {
            answers.println("@@ 0 ERR usage " + b64("usage: PeerProcess <device>"));
            System.exit(2);
        }
        InProcessPeer peer;
        try {
            peer = new InProcessPeer(args[0], "peer process " + ProcessHandle.current().pid());
        } catch (RuntimeException e) {
            e.printStackTrace();
            answers.println("@@ 0 ERR " + kind(e) + " " + b64(String.valueOf(e)));
            System.exit(1);
            return;
        }
        answers.println("@@ 0 OK ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        boolean exit = false;
        while (!exit && (line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] t = line.split(" ", -1);
            String id = t[0];
            try {
                String result = execute(peer, t);
                exit = t[1].equals("exit");
                answers.println("@@ " + id + " OK" + (result.isEmpty() ? "" : " " + result));
            } catch (RuntimeException | AssertionError e) {
                answers.println("@@ " + id + " ERR " + kind(e) + " " + b64(String.valueOf(e.getMessage())));
            }
        }
        try {
            peer.close();
        } finally {
            System.exit(0);
        }
    }

    private static String kind(Throwable e) {
        return e instanceof VerbsException v ? v.reason().name() : e.getClass().getName();
    }

    private static String execute(InProcessPeer peer, String[] t) {
        switch (t[1]) {
            case "counters" -> {
                String all = peer.counters().entrySet().stream().map(e -> e.getKey().name() + "=" + e.getValue())
                    .collect(Collectors.joining(","));
                return all.isEmpty() ? "-" : all;
            }
            case "pid" -> {
                return Long.toString(peer.processId());
            }
            case "createQp" -> {
                PeerSide.PeerQueuePair qp = peer.createQueuePair(PeerSide.QueuePairSpec.decode(t[2]));
                return qp.queuePairNumber() + " " + qp.endpoint().encode();
            }
            case "connect" -> {
                peer.connect(Integer.parseInt(t[2]), Endpoint.decode(t[3]), PeerSide.ConnectionSpec.decode(t[4]));
                return "";
            }
            case "state" -> {
                return peer.state(Integer.parseInt(t[2])).name();
            }
            case "toError" -> {
                peer.modifyToError(Integer.parseInt(t[2]));
                return "";
            }
            case "destroyQp" -> {
                peer.destroyQueuePair(Integer.parseInt(t[2]));
                return "";
            }
            case "alloc" -> {
                long length = Long.parseLong(t[2]);
                int access = Integer.parseInt(t[3]);
                String kind = t.length > 4 ? t[4] : "allocated";
                PeerSide.PeerRegion r = switch (kind) {
                    case "other" -> peer.allocateInOtherDomain(length, access);
                    case "owned" -> peer.registerCallerOwned(length, access);
                    default -> peer.allocate(length, access);
                };
                return r.id() + " " + r.address() + " " + r.length() + " " + r.rkey() + " " + r.lkey();
            }
            case "dereg" -> {
                peer.deregister(Integer.parseInt(t[2]));
                return "";
            }
            case "write" -> {
                peer.write(Integer.parseInt(t[2]), Long.parseLong(t[3]), unb64(t[4]));
                return "";
            }
            case "read" -> {
                return b64(peer.read(Integer.parseInt(t[2]), Long.parseLong(t[3]), Integer.parseInt(t[4])));
            }
            case "fill" -> {
                peer.fillPattern(Integer.parseInt(t[2]), Long.parseLong(t[3]), Long.parseLong(t[4]),
                    Long.parseLong(t[5]));
                return "";
            }
            case "mismatch" -> {
                return Long.toString(peer.firstPatternMismatch(Integer.parseInt(t[2]), Long.parseLong(t[3]),
                    Long.parseLong(t[4]), Long.parseLong(t[5])));
            }
            case "recv" -> {
                peer.postReceive(Integer.parseInt(t[2]), Long.parseLong(t[3]), sges(t[4]));
                return "";
            }
            case "send" -> {
                peer.postSend(Integer.parseInt(t[2]), new PeerSide.PeerSend(Long.parseLong(t[3]),
                    SendOpcode.valueOf(t[4]), Integer.parseInt(t[5]), Long.parseLong(t[6]), Integer.parseInt(t[7]),
                    Integer.parseInt(t[8]), Long.parseLong(t[9]), Long.parseLong(t[10]), sges(t[11])));
                return "";
            }
            case "poll" -> {
                List<Completion> done = peer.poll(Integer.parseInt(t[2]), Integer.parseInt(t[3]),
                    Long.parseLong(t[4]));
                return done.isEmpty() ? "-" : done.stream().map(Completion::encode).collect(Collectors.joining(","));
            }
            case "fadd" -> {
                long[] originals = peer.fetchAndAdd(Integer.parseInt(t[2]), Long.parseLong(t[3]),
                    Integer.parseInt(t[4]), Long.parseLong(t[5]), Integer.parseInt(t[6]));
                ByteBuffer buffer = ByteBuffer.allocate(8 * originals.length);
                buffer.asLongBuffer().put(originals);
                return b64(buffer.array());
            }
            case "reset" -> {
                peer.reset();
                return "";
            }
            case "exit" -> {
                return "";
            }
            default -> throw new IllegalArgumentException("unknown command " + t[1]);
        }
    }

    static List<PeerSide.PeerSge> sges(String token) {
        List<PeerSide.PeerSge> out = new ArrayList<>();
        if (!token.equals("-")) {
            for (String s : token.split(",")) {
                out.add(PeerSide.PeerSge.decode(s));
            }
        }
        return out;
    }

    static String b64(String text) {
        return b64(text.getBytes(StandardCharsets.UTF_8));
    }

    static String b64(byte[] bytes) {
        return bytes.length == 0 ? "-" : Base64.getEncoder().encodeToString(bytes);
    }

    static byte[] unb64(String token) {
        return token.equals("-") ? new byte[0] : Base64.getDecoder().decode(token);
    }
}
