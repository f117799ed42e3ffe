/* The bundle's libicudata.so.N (scripts/gpu/bundle.sh): ICU's data library without data. The ICU calls Kiln makes
 * (models/text/tokenizers/unicode_icu.cpp: NFC, root-locale lower-casing, case folding, properties) read tables
 * compiled into libicuuc itself, so the 30 MiB data library (7 MiB of the 64 MiB a device call carries) is not needed;
 * test_text passes against this stub (checked when the bundle is made). ICU_DATA_SYMBOL is icudtN_dat. */
const struct {
    double align;
    char bytes[32];
} ICU_DATA_SYMBOL = {0, {0}};
