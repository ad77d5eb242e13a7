package io.jccl.examples;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * Connection setup the classic verbs way (as rc_pingpong and perftest do): swap endpoint records over any out-of-
 * band channel — here one text line each way over a socket — and drive the queue pair INIT → RTR → RTS yourself.
 */
final class ExplicitSetup {
    private ExplicitSetup() {
    }

    /**
     * One text line at a time each way over a socket; the reader is created once, so lines it buffered ahead
     * are never lost between calls.
     */
    static final class LineChannel {
        private final PrintWriter out;
        private final BufferedReader in;

        LineChannel(Socket socket) throws IOException {
            out = new PrintWriter(socket.getOutputStream(), true, StandardCharsets.UTF_8);
            in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
        }

        void send(String line) {
            out.println(line);
        }

        String receive() throws IOException {
            String line = in.readLine();
            if (line == null) {
                throw new IOException("peer closed the exchange channel");
            }
            return line;
        }

        /** Sends our endpoint record and reads the peer's. */
        Endpoint exchange(Endpoint local) throws IOException {
            send(local.encode());
            return Endpoint.decode(receive());
        }
    }

    /** INIT (granting {@code access}) → RTR towards {@code remote} → RTS. */
    static void connect(QueuePair queuePair, Endpoint remote, AccessFlag... access) {
        queuePair.modify(QueuePairAttributes.toInit(access));
        finish(queuePair, remote);
    }

    /** RTR towards {@code remote} → RTS, for a QP already in INIT (receives may be posted from INIT on). */
    static void finish(QueuePair queuePair, Endpoint remote) {
        queuePair.modify(QueuePairAttributes.toReadyToReceive(remote));
        queuePair.modify(QueuePairAttributes.toReadyToSend(queuePair.initialPsn()));
    }
}
