import java.util.Arrays;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Add latency as a BookKeeper client sees it: synchronous adds of 1 KiB entries to ledgers of
 * ensemble 3, write quorum 2, ack quorum 2, for SECONDS; prints count, median and p99 in microseconds.
 * Usage: java AddLatency <metadataServiceUri> <seconds>
 */
public class AddLatency {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[1]) * 1000L;
        byte[] data = new byte[1024];
        long[] micros = new long[1 << 22];
        int n = 0;
        try (BookKeeper bk = new BookKeeper(conf)) {
            while (System.currentTimeMillis() < deadline && n < micros.length) {
                LedgerHandle lh = bk.createLedger(3, 2, 2, DigestType.CRC32C, "latency".getBytes());
                for (int i = 0; i < 1000 && System.currentTimeMillis() < deadline && n < micros.length; i++) {
                    long start = System.nanoTime();
                    lh.addEntry(data);
                    micros[n++] = (System.nanoTime() - start) / 1000;
                }
                lh.close();
                bk.deleteLedger(lh.getId());
            }
        }
        long[] taken = Arrays.copyOf(micros, n);
        Arrays.sort(taken);
        System.out.printf("adds=%d median_us=%d p99_us=%d%n", n, taken[n / 2], taken[(int) (n * 0.99)]);
        System.exit(0);
    }
}
