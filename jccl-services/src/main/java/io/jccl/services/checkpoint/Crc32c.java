package io.jccl.services.checkpoint;

/**
 * CRC32C of a concatenation from the CRC32C of its parts (zlib's {@code crc32_combine}, GF(2) matrices, for the
 * Castagnoli polynomial): lets the agent checksum one shard in pieces on several threads.
 */
final class Crc32c {
    /** The reflected Castagnoli polynomial {@link java.util.zip.CRC32C} uses. */
    private static final int POLYNOMIAL = 0x82F63B78;

    private Crc32c() {
    }

    /** CRC32C of A‖B from crc(A), crc(B) and B's length in bytes. */
    static int combine(int crcA, int crcB, long lengthB) {
        if (lengthB <= 0) {
            return crcA;
        }
        int[] even = new int[32];
        int[] odd = new int[32];
        odd[0] = POLYNOMIAL; // the operator for one zero bit
        int row = 1;
        for (int n = 1; n < 32; n++) {
            odd[n] = row;
            row <<= 1;
        }
        square(even, odd); // two zero bits
        square(odd, even); // four zero bits
        long len = lengthB;
        int crc = crcA;
        // Apply len zero bytes to crc(A): the first square gives one zero byte.
        do {
            square(even, odd);
            if ((len & 1) != 0) {
                crc = times(even, crc);
            }
            len >>>= 1;
            if (len == 0) {
                break;
            }
            square(odd, even);
            if ((len & 1) != 0) {
                crc = times(odd, crc);
            }
            len >>>= 1;
        } while (len != 0);
        return crc ^ crcB;
    }

    private static int times(int[] matrix, int vector) {
        int sum = 0;
        for (int i = 0; vector != 0; i++, vector >>>= 1) {
            if ((vector & 1) != 0) {
                sum ^= matrix[i];
            }
        }
        return sum;
    }

    private static void square(int[] square, int[] matrix) {
        for (int n = 0; n < 32; n++) {
            square[n] = times(matrix, matrix[n]);
        }
    }
}
