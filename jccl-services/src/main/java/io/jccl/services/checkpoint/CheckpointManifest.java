package io.jccl.services.checkpoint;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * What one durable checkpoint holds: its step, the layout its shards were written in, and per shard the CRC32C and
 * the file name (relative to the checkpoint's directory). Stored as text ({@code MANIFEST}) whose last line is the
 * CRC32C of the lines before it, so a torn or edited manifest is refused rather than half-read.
 *
 * @param step the training step
 * @param layout how the state was sharded when it was written
 * @param crcs CRC32C of each shard (unsigned, in an int)
 * @param files each shard's file name
 */
public record CheckpointManifest(long step, ShardLayout layout, int[] crcs, String[] files) {
    static final String MAGIC = "jccl-checkpoint 1";

    /** Checks that there is one CRC and one file per shard. */
    public CheckpointManifest {
        if (crcs.length != layout.shards() || files.length != layout.shards()) {
            throw new IllegalArgumentException("manifest of step " + step + ": " + crcs.length + " CRCs and "
                + files.length + " files for " + layout.shards() + " shards");
        }
        crcs = crcs.clone();
        files = files.clone();
    }

    /** CRC32C of shard {@code shard}. */
    public int crc(int shard) {
        return crcs[shard];
    }

    /** File name of shard {@code shard}. */
    public String file(int shard) {
        return files[shard];
    }

    @Override
    public int[] crcs() {
        return crcs.clone();
    }

    @Override
    public String[] files() {
        return files.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof CheckpointManifest m && m.step == step && m.layout.equals(layout)
            && Arrays.equals(m.crcs, crcs) && Arrays.equals(m.files, files);
    }

    @Override
    public int hashCode() {
        return Long.hashCode(step) * 31 + Arrays.hashCode(crcs);
    }

    @Override
    public String toString() {
        return "checkpoint step " + step + " (" + layout.totalBytes() + " B in " + layout.shards() + " shards)";
    }

    /** The manifest's text, with its check line. */
    byte[] encode() {
        StringBuilder sb = new StringBuilder(MAGIC).append('\n')
            .append("step ").append(step).append('\n')
            .append("total-bytes ").append(layout.totalBytes()).append('\n')
            .append("element-bytes ").append(layout.elementBytes()).append('\n')
            .append("shards ").append(layout.shards()).append('\n');
        for (int r = 0; r < layout.shards(); r++) {
            sb.append("shard ").append(r).append(' ').append(layout.offset(r)).append(' ').append(layout.length(r))
                .append(' ').append(String.format("%08x", crcs[r])).append(' ').append(files[r]).append('\n');
        }
        byte[] body = sb.toString().getBytes(StandardCharsets.UTF_8);
        CRC32C crc = new CRC32C();
        crc.update(body);
        byte[] check = String.format("check %08x%n", (int) crc.getValue()).getBytes(StandardCharsets.UTF_8);
        byte[] all = Arrays.copyOf(body, body.length + check.length);
        System.arraycopy(check, 0, all, body.length, check.length);
        return all;
    }

    /**
     * Parses a manifest's text.
     *
     * @throws IllegalArgumentException naming what is wrong (the caller names the file)
     */
    static CheckpointManifest decode(byte[] text) {
        String s = new String(text, StandardCharsets.UTF_8);
        int checkAt = s.lastIndexOf("check ");
        if (!s.startsWith(MAGIC + "\n") || checkAt < 0 || !s.endsWith("\n")) {
            throw new IllegalArgumentException("not a complete JCCL checkpoint manifest");
        }
        CRC32C crc = new CRC32C();
        crc.update(text, 0, s.substring(0, checkAt).getBytes(StandardCharsets.UTF_8).length);
        int stored = (int) Long.parseLong(s.substring(checkAt + 6).trim(), 16);
        if (stored != (int) crc.getValue()) {
            throw new IllegalArgumentException(String.format("manifest check %08x does not match its contents (%08x)",
                stored, (int) crc.getValue()));
        }
        String[] lines = s.substring(0, checkAt).split("\n");
        long step = Long.parseLong(field(lines, 1, "step"));
        long total = Long.parseLong(field(lines, 2, "total-bytes"));
        int element = Integer.parseInt(field(lines, 3, "element-bytes"));
        int shards = Integer.parseInt(field(lines, 4, "shards"));
        ShardLayout layout = new ShardLayout(total, element, shards);
        if (lines.length != 5 + shards) {
            throw new IllegalArgumentException(lines.length - 5 + " shard lines for " + shards + " shards");
        }
        int[] crcs = new int[shards];
        String[] files = new String[shards];
        for (int r = 0; r < shards; r++) {
            String[] f = lines[5 + r].split(" ");
            if (f.length != 6 || !f[0].equals("shard") || Integer.parseInt(f[1]) != r
                || Long.parseLong(f[2]) != layout.offset(r) || Long.parseLong(f[3]) != layout.length(r)
                || f[5].contains("/")) {
                throw new IllegalArgumentException("bad shard line '" + lines[5 + r] + "'");
            }
            crcs[r] = (int) Long.parseLong(f[4], 16);
            files[r] = f[5];
        }
        return new CheckpointManifest(step, layout, crcs, files);
    }

    private static String field(String[] lines, int index, String name) {
        if (lines.length <= index || !lines[index].startsWith(name + " ")) {
            throw new IllegalArgumentException("line " + (index + 1) + " should be '" + name + " …'");
        }
        return lines[index].substring(name.length() + 1);
    }
}
