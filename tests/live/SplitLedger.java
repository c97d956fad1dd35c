import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;

/**
 * A closed ledger in two fragments, made by BookKeeper's own client: the caller decides which bookies run
 * while each half is written, so the ledger's ensemble change happens when the caller says, not by chance.
 *
 * Usage: java -cp LIVEBK_LIB/*:CLASSES SplitLedger METADATA_SERVICE_URI ENTRIES_PER_HALF
 * Creates a ledger (ensemble 3, write quorum 3, ack quorum 2, CRC32C, the kit's password) and writes the
 * first half of its entries, then prints "first LEDGER BOOKIE,BOOKIE,BOOKIE" and waits for one line on its
 * standard input (meanwhile the caller stops a bookie of that ensemble and starts another outside it). It
 * writes the second half (the first add to the stopped bookie fails, and the client replaces that bookie),
 * closes the ledger and prints one "ensemble FIRST_ENTRY BOOKIE,BOOKIE,BOOKIE" line per fragment, then
 * "closed LEDGER LAST_ENTRY".
 */
public class SplitLedger {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setAddEntryTimeout(30);
        int half = Integer.parseInt(args[1]);
        try (BookKeeper bk = new BookKeeper(conf)) {
            LedgerHandle ledger = bk.createLedger(3, 3, 2, BookKeeper.DigestType.CRC32C,
                    "livebk".getBytes(StandardCharsets.UTF_8));
            for (int entry = 0; entry < half; entry++) {
                ledger.addEntry(payload(ledger.getId(), entry));
            }
            System.out.printf("first %d %s%n", ledger.getId(), names(ledger.getLedgerMetadata().getEnsembleAt(0)));
            System.out.flush();
            if (new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine() == null) {
                throw new IllegalStateException("standard input closed before the second half");
            }
            for (int entry = half; entry < 2 * half; entry++) {
                ledger.addEntry(payload(ledger.getId(), entry));
            }
            ledger.close();
            for (Map.Entry<Long, ? extends List<BookieId>> fragment
                    : ledger.getLedgerMetadata().getAllEnsembles().entrySet()) {
                System.out.printf("ensemble %d %s%n", fragment.getKey(), names(fragment.getValue()));
            }
            System.out.printf("closed %d %d%n", ledger.getId(), ledger.getLastAddConfirmed());
        }
        System.out.flush();
        System.exit(0);
    }

    private static byte[] payload(long ledgerId, int entry) {
        byte[] bytes = new byte[1024];
        Arrays.fill(bytes, (byte) ('a' + entry % 26));
        byte[] label = String.format("ledger %d entry %d ", ledgerId, entry).getBytes(StandardCharsets.UTF_8);
        System.arraycopy(label, 0, bytes, 0, label.length);
        return bytes;
    }

    private static String names(List<BookieId> ensemble) {
        return ensemble.stream().map(BookieId::toString).collect(Collectors.joining(","));
    }
}
