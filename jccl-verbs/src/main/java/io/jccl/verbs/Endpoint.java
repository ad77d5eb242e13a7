package io.jccl.verbs;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

/**
 * What a peer needs to connect a reliable-connected queue pair to this one: provider, device, QP number, initial
 * PSN and a provider-specific address (for shm the host identity and the QP's shared-memory name; for tcp a
 * socket address and connection secret). Exchange it out of band — as the classic verbs examples exchange LID,
 * QPN and PSN — then drive the peer's QP through INIT→RTR→RTS with it.
 *
 * @param provider provider name (for example {@code shm} or {@code tcp})
 * @param device device name
 * @param queuePairNumber the QP's 24-bit number
 * @param packetSequenceNumber the QP's initial send PSN (24 bits)
 * @param address provider-specific address; opaque to everyone else
 */
public record Endpoint(String provider, String device, int queuePairNumber, int packetSequenceNumber,
                       String address) implements Serializable {

    /** Validates the fields. */
    public Endpoint {
        if (provider == null || provider.isEmpty() || device == null || device.isEmpty() || address == null) {
            throw new IllegalArgumentException("endpoint needs provider, device and address");
        }
        if ((queuePairNumber & ~0xFFFFFF) != 0 || (packetSequenceNumber & ~0xFFFFFF) != 0) {
            throw new IllegalArgumentException("QPN and PSN are 24-bit values");
        }
    }

    /** A single-line text form, safe to print, send over a socket or put in a rendezvous store. */
    public String encode() {
        Base64.Encoder b64 = Base64.getUrlEncoder().withoutPadding();
        return "jccl-ep1:" + b64.encodeToString(provider.getBytes(StandardCharsets.UTF_8)) + ':'
            + b64.encodeToString(device.getBytes(StandardCharsets.UTF_8)) + ':'
            + Integer.toHexString(queuePairNumber) + ':' + Integer.toHexString(packetSequenceNumber) + ':'
            + b64.encodeToString(address.getBytes(StandardCharsets.UTF_8));
    }

    /** Parses {@link #encode()}'s form. */
    public static Endpoint decode(String text) {
        String[] parts = text.trim().split(":", -1);
        if (parts.length != 6 || !parts[0].equals("jccl-ep1")) {
            throw new IllegalArgumentException("not a JCCL endpoint record: " + text);
        }
        Base64.Decoder b64 = Base64.getUrlDecoder();
        try {
            return new Endpoint(new String(b64.decode(parts[1]), StandardCharsets.UTF_8),
                new String(b64.decode(parts[2]), StandardCharsets.UTF_8), Integer.parseInt(parts[3], 16),
                Integer.parseInt(parts[4], 16), new String(b64.decode(parts[5]), StandardCharsets.UTF_8));
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("malformed JCCL endpoint record: " + text, e);
        }
    }

    @Override
    public String toString() {
        return provider + "/" + device + " QPN 0x" + String.format("%06x", queuePairNumber) + " PSN 0x"
            + String.format("%06x", packetSequenceNumber);
    }
}
