//! Derives the readers of request bodies (`edge::body::RequestBody`) and of the objects nested in
//! them (`edge::body::Member`) from the attributes that already describe them to OpenAPI: each
//! member's name (`#[schema(rename)]` or `#[serde(rename)]`), whether it is required, nullable or
//! clearable (its type: `T`, `Option<T>`, `Option<Option<T>>`, and `#[schema(nullable = false)]`),
//! and its bounds (`min_length`, `max_length`, `pattern`, `minimum`, `maximum`, `min_items`,
//! `max_items`). So every constraint the document states is the one the server enforces, and no
//! handler reads a member by name.
//!
//! Two attributes of its own say what the document cannot:
//! - `#[member(check = f)]` (`fn(&str) -> Result<(), String>`) or `#[member(parse = f)]`
//!   (`fn(&str) -> Result<T, String>`) on a string member, for a rule with a sentence of its own;
//! - `#[request_body(ignore = [..], forbid = [..], because = "..", check = f, plain = f)]` on the
//!   struct: members accepted and dropped, members refused with a reason, a check across members
//!   (`fn(&mut Self, &mut Fields)`), and a fast reader of the route's common shape;
//! - `#[request_body(context = C)]` for a body whose rules depend on more than the body (the
//!   operator's flags, the record a PATCH changes): it implements `RequestBodyIn<C>`, and its
//!   members may have `#[member(check_in = f)]` (`fn(&str, &C) -> Result<(), String>`) or
//!   `#[member(parse_in = f)]` (`fn(&str, &C) -> Result<T, String>`) and, when
//!   optional, `#[member(required_in = f)]` (`fn(&C) -> bool`).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::parse::ParseStream;
use syn::{
    Data, DeriveInput, Expr, ExprArray, Fields, GenericArgument, Ident, LitBool, LitStr, Path,
    PathArguments, Token, Type, parse_macro_input,
};

/// `impl RequestBody`: the struct is a whole request body.
#[proc_macro_derive(RequestBody, attributes(request_body, member))]
pub fn derive_request_body(input: TokenStream) -> TokenStream {
    expand(parse_macro_input!(input as DeriveInput), Kind::Body)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `impl Member`: the struct is an object nested in a body, read under its member's name.
#[proc_macro_derive(Member, attributes(request_body, member))]
pub fn derive_member(input: TokenStream) -> TokenStream {
    expand(parse_macro_input!(input as DeriveInput), Kind::Nested)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Body,
    Nested,
}

/// The struct's own attribute.
#[derive(Default)]
struct BodyAttrs {
    ignore: Vec<LitStr>,
    forbid: Vec<LitStr>,
    because: Option<LitStr>,
    check: Option<Path>,
    plain: Option<Path>,
    context: Option<Type>,
}

/// What a field's attributes say about reading it.
#[derive(Default)]
struct MemberAttrs {
    rename: Option<LitStr>,
    nullable: Option<bool>,
    min_length: Option<Expr>,
    max_length: Option<Expr>,
    pattern: Option<LitStr>,
    minimum: Option<Expr>,
    maximum: Option<Expr>,
    min_items: Option<Expr>,
    max_items: Option<Expr>,
    check: Option<Path>,
    parse: Option<Path>,
    check_in: Option<Path>,
    parse_in: Option<Path>,
    required_in: Option<Path>,
}

/// How present a member must be, from its type.
enum Presence<'a> {
    Required(&'a Type),
    Optional(&'a Type),
    /// `Option<Option<T>>`: absent, null (clear it), or a value.
    Clearable(&'a Type),
}

fn expand(input: DeriveInput, kind: Kind) -> syn::Result<Tokens> {
    let name = &input.ident;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            name,
            "only structs are request bodies",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            name,
            "a body's members are named fields",
        ));
    };
    let attrs = body_attrs(&input.attrs)?;

    let mut reads = Vec::new();
    let mut inits = Vec::new();
    for field in &fields.named {
        let ident = field.ident.as_ref().expect("named fields have names");
        let member = member_attrs(&field.attrs)?;
        let key = member.rename.clone().unwrap_or_else(|| {
            LitStr::new(ident.to_string().trim_start_matches("r#"), ident.span())
        });
        let var = format_ident!("member_{}", ident);
        let presence = presence(&field.ty);
        let inner = match presence {
            Presence::Required(t) | Presence::Optional(t) | Presence::Clearable(t) => t,
        };
        let (read, expected) = reader(&member, inner)?;
        let (statics, rules) = rules(&member, ident);
        let call = match presence {
            Presence::Required(_) => {
                quote! { f.required(at, map, #key, #expected, #rules, #read) }
            }
            Presence::Optional(_) => {
                // Only `nullable = false` says so; utoipa documents an `Option` as nullable.
                let nullable = member.nullable.unwrap_or(true);
                match &member.required_in {
                    // Required in some contexts only (a creation, not a PATCH).
                    Some(required_in) => quote! {
                        if #required_in(context) {
                            f.required(at, map, #key, #expected, #rules, #read).map(Some)
                        } else {
                            f.optional(at, map, #key, #nullable, #rules, #read)
                        }
                    },
                    None => quote! { f.optional(at, map, #key, #nullable, #rules, #read) },
                }
            }
            Presence::Clearable(_) => quote! { f.clearable(at, map, #key, #rules, #read) },
        };
        reads.push(quote! { let #var = { #statics #call }; });
        inits.push(quote! { #ident: #var? });
    }

    let ignores = attrs.ignore.iter().map(|k| quote! { map.remove(#k); });
    let forbids = if attrs.forbid.is_empty() {
        quote! {}
    } else {
        let Some(because) = &attrs.because else {
            return Err(syn::Error::new(
                Span::call_site(),
                "`forbid` needs `because = \"...\"`, the issue each refused member is given",
            ));
        };
        let keys = &attrs.forbid;
        quote! { #( f.forbid_in(at, map, #keys, #because); )* }
    };
    let check = match (&attrs.check, &attrs.context) {
        (Some(c), Some(_)) => quote! { #c(&mut value, f, context); },
        (Some(c), None) => quote! { #c(&mut value, f); },
        (None, _) => quote! {},
    };
    let context_type = match &attrs.context {
        Some(t) => quote! { #t },
        None => quote! { () },
    };

    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let read_members = quote! {
        impl #impl_generics #name #ty_generics #where_clause {
            /// This object's members from `map` (named under `at`), every problem recorded on
            /// `f`; `None` only when there was one. Derived from the struct's attributes.
            #[allow(unused_variables)]
            fn read_members(
                f: &mut ::edge::body::Fields,
                at: &str,
                map: &mut ::edge::body::Map,
                context: &#context_type,
            ) -> ::core::option::Option<Self> {
                #( #ignores )*
                #forbids
                #( #reads )*
                f.leftovers(at, map);
                #[allow(unused_mut)]
                let mut value = Self { #( #inits, )* };
                #check
                ::core::option::Option::Some(value)
            }
        }
    };
    let trait_impl = match (kind, &attrs.context) {
        (Kind::Body, Some(context)) => quote! {
            impl #impl_generics ::edge::body::RequestBodyIn<#context> for #name #ty_generics #where_clause {
                fn read_in(
                    f: &mut ::edge::body::Fields,
                    context: &#context,
                ) -> ::core::option::Option<Self> {
                    let mut map = f.take_all();
                    Self::read_members(f, "", &mut map, context)
                }
            }
        },
        (Kind::Nested, Some(_)) => {
            return Err(syn::Error::new(
                Span::call_site(),
                "a nested object is read without a context",
            ));
        }
        (Kind::Body, None) => {
            let plain = attrs
                .plain
                .as_ref()
                .map(|p| {
                    quote! {
                        fn read_plain(bytes: &[u8]) -> ::core::option::Option<Self> {
                            #p(bytes)
                        }
                    }
                })
                .unwrap_or_default();
            quote! {
                impl #impl_generics ::edge::body::RequestBody for #name #ty_generics #where_clause {
                    fn read(f: &mut ::edge::body::Fields) -> ::core::option::Option<Self> {
                        let mut map = f.take_all();
                        Self::read_members(f, "", &mut map, &())
                    }
                    #plain
                }
            }
        }
        (Kind::Nested, None) => quote! {
            impl #impl_generics ::edge::body::Member for #name #ty_generics #where_clause {
                const EXPECTED: &'static str = "object";
                fn read(
                    f: &mut ::edge::body::Fields,
                    name: &str,
                    value: ::edge::body::Value,
                ) -> ::core::option::Option<Self> {
                    let mut map = f.object(name, value)?;
                    Self::read_members(f, name, &mut map, &())
                }
            }
        },
    };
    Ok(quote! { #read_members #trait_impl })
}

/// How a member's value becomes the field's: a rule of its own, or the type's `Member` reader.
fn reader(member: &MemberAttrs, inner: &Type) -> syn::Result<(Tokens, Tokens)> {
    let rules = [
        member.check.is_some(),
        member.parse.is_some(),
        member.check_in.is_some(),
        member.parse_in.is_some(),
    ];
    if rules.into_iter().filter(|&r| r).count() > 1 {
        return Err(syn::Error::new_spanned(
            inner,
            "a member has one of `check`, `parse`, `check_in` and `parse_in`",
        ));
    }
    if let Some(check_in) = &member.check_in {
        return Ok((
            quote! { |f: &mut ::edge::body::Fields, name: &str, value| ::edge::body::checked(f, name, value, |s| #check_in(s, context)) },
            quote! { "string" },
        ));
    }
    if let Some(parse_in) = &member.parse_in {
        return Ok((
            quote! { |f: &mut ::edge::body::Fields, name: &str, value| ::edge::body::parsed(f, name, value, |s| #parse_in(s, context)) },
            quote! { "string" },
        ));
    }
    Ok(match (&member.check, &member.parse) {
        (Some(check), _) => (
            quote! { |f: &mut ::edge::body::Fields, name: &str, value| ::edge::body::checked(f, name, value, #check) },
            quote! { "string" },
        ),
        (None, Some(parse)) => (
            quote! { |f: &mut ::edge::body::Fields, name: &str, value| ::edge::body::parsed(f, name, value, #parse) },
            quote! { "string" },
        ),
        (None, None) => (
            quote! { <#inner as ::edge::body::Member>::read },
            quote! { <#inner as ::edge::body::Member>::EXPECTED },
        ),
    })
}

/// The member's bounds as `edge::body::Constraints`, with its pattern compiled once.
fn rules(member: &MemberAttrs, ident: &Ident) -> (Tokens, Tokens) {
    let opt_usize = |e: &Option<Expr>| match e {
        Some(e) => quote! { ::core::option::Option::Some((#e) as usize) },
        None => quote! { ::core::option::Option::None },
    };
    let opt_f64 = |e: &Option<Expr>| match e {
        Some(e) => quote! { ::core::option::Option::Some((#e) as f64) },
        None => quote! { ::core::option::Option::None },
    };
    let (statics, pattern) = match &member.pattern {
        Some(source) => {
            let stat = format_ident!("PATTERN_{}", ident.to_string().to_uppercase());
            (
                quote! {
                    static #stat: ::edge::body::Pattern = ::edge::body::Pattern::new(#source);
                },
                quote! { ::core::option::Option::Some(&#stat) },
            )
        }
        None => (quote! {}, quote! { ::core::option::Option::None }),
    };
    let (min_length, max_length) = (opt_usize(&member.min_length), opt_usize(&member.max_length));
    let (minimum, maximum) = (opt_f64(&member.minimum), opt_f64(&member.maximum));
    let (min_items, max_items) = (opt_usize(&member.min_items), opt_usize(&member.max_items));
    (
        statics,
        quote! {
            &::edge::body::Constraints {
                min_length: #min_length,
                max_length: #max_length,
                pattern: #pattern,
                minimum: #minimum,
                maximum: #maximum,
                min_items: #min_items,
                max_items: #max_items,
            }
        },
    )
}

/// `T`, `Option<T>` or `Option<Option<T>>`.
fn presence(ty: &Type) -> Presence<'_> {
    match option_of(ty) {
        None => Presence::Required(ty),
        Some(inner) => match option_of(inner) {
            None => Presence::Optional(inner),
            Some(innermost) => Presence::Clearable(innermost),
        },
    }
}

fn option_of(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Option" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}

fn body_attrs(attrs: &[syn::Attribute]) -> syn::Result<BodyAttrs> {
    let mut out = BodyAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("request_body")) {
        attr.parse_nested_meta(|meta| {
            let strings = |input: ParseStream| -> syn::Result<Vec<LitStr>> {
                let array: ExprArray = input.parse()?;
                array
                    .elems
                    .into_iter()
                    .map(|e| match e {
                        Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Ok(s),
                        other => Err(syn::Error::new_spanned(other, "a member's name, quoted")),
                    })
                    .collect()
            };
            if meta.path.is_ident("ignore") {
                out.ignore = strings(meta.value()?)?;
            } else if meta.path.is_ident("forbid") {
                out.forbid = strings(meta.value()?)?;
            } else if meta.path.is_ident("because") {
                out.because = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("check") {
                out.check = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("plain") {
                out.plain = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("context") {
                out.context = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error("expected ignore, forbid, because, check, plain or context"));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

fn member_attrs(attrs: &[syn::Attribute]) -> syn::Result<MemberAttrs> {
    let mut out = MemberAttrs::default();
    for attr in attrs {
        if attr.path().is_ident("member") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("check") {
                    out.check = Some(meta.value()?.parse()?);
                } else if meta.path.is_ident("parse") {
                    out.parse = Some(meta.value()?.parse()?);
                } else if meta.path.is_ident("check_in") {
                    out.check_in = Some(meta.value()?.parse()?);
                } else if meta.path.is_ident("parse_in") {
                    out.parse_in = Some(meta.value()?.parse()?);
                } else if meta.path.is_ident("required_in") {
                    out.required_in = Some(meta.value()?.parse()?);
                } else {
                    return Err(meta.error("expected check, parse, check_in or required_in"));
                }
                Ok(())
            })?;
        } else if attr.path().is_ident("schema") || attr.path().is_ident("serde") {
            let schema = attr.path().is_ident("schema");
            // Both attributes say much this reader has no use for (`value_type`, `example`,
            // `serialize_with`): those are skipped whole, whatever their form.
            attr.parse_nested_meta(|meta| {
                let key = meta.path.get_ident().map(Ident::to_string);
                match key.as_deref() {
                    Some("rename") => out.rename = Some(meta.value()?.parse()?),
                    Some("nullable") if schema => {
                        out.nullable = Some(if meta.input.peek(Token![=]) {
                            meta.value()?.parse::<LitBool>()?.value
                        } else {
                            true
                        });
                    }
                    Some("min_length") if schema => out.min_length = Some(meta.value()?.parse()?),
                    Some("max_length") if schema => out.max_length = Some(meta.value()?.parse()?),
                    Some("pattern") if schema => out.pattern = Some(meta.value()?.parse()?),
                    Some("minimum") if schema => out.minimum = Some(meta.value()?.parse()?),
                    Some("maximum") if schema => out.maximum = Some(meta.value()?.parse()?),
                    Some("min_items") if schema => out.min_items = Some(meta.value()?.parse()?),
                    Some("max_items") if schema => out.max_items = Some(meta.value()?.parse()?),
                    _ => skip(meta.input)?,
                }
                Ok(())
            })?;
        }
    }
    Ok(out)
}

/// Passes over one attribute argument's value (`= anything` up to the next comma, or a
/// parenthesised list), so that keys this reader does not know cost nothing.
fn skip(input: ParseStream) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
    }
    let mut depth = 0usize;
    loop {
        if input.is_empty() || (depth == 0 && input.peek(Token![,])) {
            break;
        }
        // Angle brackets are not groups to the tokenizer; a type such as `Map<K, V>` has a comma
        // inside them.
        if input.peek(Token![<]) {
            depth += 1;
        } else if input.peek(Token![>]) {
            depth = depth.saturating_sub(1);
        }
        input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}
