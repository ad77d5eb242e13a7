package io.jccl.services.ingest;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.zip.CRC32C;

/**
 * The consumer's durable state in one directory: segment files of records ({@code ingest-N.seg}, the ring's bytes
 * as they were, CRC32C per record) and a {@code MANIFEST} that names the segments that count and, per producer,
 * the highest sequence they hold. The manifest is the commit point: a segment is forced to disk before a manifest
 * naming it is written to {@code MANIFEST.tmp}, forced, renamed over {@code MANIFEST} and the directory forced; a
 * segment the manifest does not name (a snapshot cut short by {@code kill -9} or a full disk) is deleted at recovery.
 */
final class SnapshotStore {
    static final String MANIFEST = "MANIFEST";
    private static final String HEADER = "jccl-ingest-manifest 1";

    /** A sealed segment: its name, bytes and records. */
    record Segment(String name, long bytes, long records) {
        /** Replaces the entry of the same name (a segment that grew since the last snapshot) or appends. */
        static void put(List<Segment> segments, Segment segment) {
            if (!segments.isEmpty() && segments.getLast().name().equals(segment.name())) {
                segments.set(segments.size() - 1, segment);
            } else {
                segments.add(segment);
            }
        }

        long number() {
            return Long.parseLong(name.substring("ingest-".length(), name.length() - ".seg".length()));
        }
    }

    /** What a directory holds after recovery. */
    record State(long snapshot, List<Segment> segments, long[] durable) {
        long lastSegmentNumber() {
            return segments.isEmpty() ? 0 : segments.getLast().number();
        }
    }

    private SnapshotStore() {
    }

    static String segmentName(long number) {
        return "ingest-" + number + ".seg";
    }

    /**
     * Recovers a directory: checks the manifest and every record of every segment it names, deletes segments it does
     * not name, and returns the durable state (an empty state for a new directory).
     *
     * @throws IngestException naming the file and what is wrong when a check fails
     */
    static State recover(Path dir, int maxProducers, int maxPayload) {
        try {
            Files.createDirectories(dir);
            Files.deleteIfExists(dir.resolve(MANIFEST + ".tmp"));
            State state = readManifest(dir, maxProducers);
            List<String> named = state.segments().stream().map(Segment::name).toList();
            try (var files = Files.list(dir)) {
                for (Path file : files.toList()) {
                    String name = file.getFileName().toString();
                    if (name.matches("ingest-[0-9]+\\.seg") && !named.contains(name)) {
                        Files.delete(file); // written after the last manifest: never acknowledged
                    }
                }
            }
            for (Segment segment : state.segments()) {
                Path file = dir.resolve(segment.name());
                try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE)) {
                    if (channel.size() > segment.bytes()) {
                        channel.truncate(segment.bytes()); // written after the last snapshot: not acknowledged
                        channel.force(true);
                    }
                }
                scan(dir, segment, maxPayload, null);
            }
            return state;
        } catch (IOException e) {
            throw new IngestException("cannot recover ingest snapshots in " + dir + ": " + e, e);
        }
    }

    /** Reads the records of every segment the manifest names, in order. */
    static State replay(Path dir, RecordHandler handler) {
        State state;
        try {
            state = readManifest(dir, 1 << 10);
        } catch (IOException e) {
            throw new IngestException("cannot read the ingest manifest in " + dir + ": " + e, e);
        }
        for (Segment segment : state.segments()) {
            scan(dir, segment, Integer.MAX_VALUE - 64, handler);
        }
        return state;
    }

    private static State readManifest(Path dir, int maxProducers) throws IOException {
        Path file = dir.resolve(MANIFEST);
        List<String> lines;
        try {
            lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            return new State(0, List.of(), new long[maxProducers]);
        }
        if (lines.size() < 3 || !lines.getFirst().equals(HEADER) || !lines.getLast().startsWith("crc32c ")) {
            throw new IngestException(file + " is not an ingest manifest (" + lines.size() + " lines)");
        }
        String body = String.join("\n", lines.subList(0, lines.size() - 1)) + "\n";
        String expected = lines.getLast().substring("crc32c ".length());
        if (!expected.equals(crcHex(body))) {
            throw new IngestException(file + ": manifest CRC32C mismatch (stored " + expected + ", computed "
                + crcHex(body) + ")");
        }
        long snapshot = 0;
        List<Segment> segments = new ArrayList<>();
        long[] durable = new long[maxProducers];
        for (String line : lines.subList(1, lines.size() - 1)) {
            String[] f = line.split(" ");
            switch (f[0]) {
                case "snapshot" -> snapshot = Long.parseLong(f[1]);
                case "segment" -> segments.add(new Segment(f[1], Long.parseLong(f[2]), Long.parseLong(f[3])));
                case "producer" -> {
                    int id = Integer.parseInt(f[1]);
                    if (id >= durable.length) {
                        throw new IngestException(file + " names producer " + id + " but the consumer allows ids"
                            + " below " + maxProducers);
                    }
                    durable[id] = Long.parseLong(f[2]);
                }
                default -> throw new IngestException(file + ": unknown manifest line '" + line + "'");
            }
        }
        return new State(snapshot, segments, durable);
    }

    /** Checks (and hands to {@code handler} when not null) every record of a segment. */
    private static void scan(Path dir, Segment segment, int maxPayload, RecordHandler handler) {
        Path file = dir.resolve(segment.name());
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ); Arena arena = Arena.ofConfined()) {
            long size = channel.size();
            if (size < segment.bytes()) {
                throw new IngestException(file + " holds " + size + " bytes, the manifest says " + segment.bytes());
            }
            MemorySegment data = size == 0 ? MemorySegment.NULL
                : channel.map(FileChannel.MapMode.READ_ONLY, 0, segment.bytes(), arena);
            ByteBuffer view = size == 0 ? ByteBuffer.allocate(0) : data.asByteBuffer();
            CRC32C crc = new CRC32C();
            long at = 0;
            long records = 0;
            while (at < segment.bytes()) {
                int length = segment.bytes() - at < RecordFormat.HEADER_BYTES ? -1
                    : RecordFormat.trustedLength(data, at, maxPayload);
                if (length < 0 || at + RecordFormat.recordBytes(length) > segment.bytes()) {
                    throw new IngestException(file + ": malformed record header at offset " + at);
                }
                if (!RecordFormat.crcMatches(data, view, at, length, crc)) {
                    throw new IngestException(file + ": CRC32C mismatch in the record at offset " + at
                        + " (producer " + RecordFormat.producer(data, at) + ", sequence "
                        + RecordFormat.sequence(data, at) + ")");
                }
                if (handler != null) {
                    handler.onRecord(RecordFormat.producer(data, at), RecordFormat.sequence(data, at),
                        RecordFormat.timestamp(data, at), data, at + RecordFormat.HEADER_BYTES, length);
                }
                at += RecordFormat.recordBytes(length);
                records++;
            }
            if (records != segment.records()) {
                throw new IngestException(file + " holds " + records + " records, the manifest says "
                    + segment.records());
            }
        } catch (IOException e) {
            throw new IngestException("cannot read " + file + ": " + e, e);
        }
    }

    /**
     * Commits a snapshot: forces the new segment, writes the manifest naming every segment and the durable sequences
     * to a temporary file, forces it, renames it over the manifest and forces the directory.
     */
    static void commit(Path dir, FileChannel newSegment, long snapshot, List<Segment> segments, long[] durable)
        throws IOException {
        if (newSegment != null) {
            newSegment.force(true);
        }
        StringBuilder body = new StringBuilder(HEADER).append('\n');
        body.append("snapshot ").append(snapshot).append('\n');
        for (Segment s : segments) {
            body.append("segment ").append(s.name()).append(' ').append(s.bytes()).append(' ').append(s.records())
                .append('\n');
        }
        for (int id = 0; id < durable.length; id++) {
            if (durable[id] > 0) {
                body.append("producer ").append(id).append(' ').append(durable[id]).append('\n');
            }
        }
        String text = body + "crc32c " + crcHex(body.toString()) + "\n";
        Path tmp = dir.resolve(MANIFEST + ".tmp");
        try (FileChannel out = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
            StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer bytes = ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
            while (bytes.hasRemaining()) {
                out.write(bytes);
            }
            out.force(true);
        } catch (IOException e) {
            Files.deleteIfExists(tmp);
            throw e;
        }
        try {
            Files.move(tmp, dir.resolve(MANIFEST), StandardCopyOption.ATOMIC_MOVE,
                StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("the file system of " + dir + " cannot rename atomically", e);
        }
        try (FileChannel directory = FileChannel.open(dir, StandardOpenOption.READ)) {
            directory.force(true); // the rename itself is durable only once the directory is
        }
    }

    private static String crcHex(String text) {
        CRC32C crc = new CRC32C();
        crc.update(text.getBytes(StandardCharsets.UTF_8));
        return HexFormat.of().toHexDigits((int) crc.getValue());
    }

    static long[] copy(long[] values) {
        return Arrays.copyOf(values, values.length);
    }
}
